. .device/setup.sh
B=/tmp/b/bin
rm -rf /tmp/r; mkdir -p /tmp/r
run() { n=$1; b=$2; shift 2; $B/$b --families dot4 "$@" --x-q8 --json /tmp/r/${n}.json > /tmp/r/${n}.txt 2>&1; }
for r in 1 2; do
 run muse_head_$r bench_head --types q5_k --shapes muse
 for wg in 256 192 384 288; do run muse_new_wg${wg}_$r bench_new --types q5_k --shapes muse --coop-wg $wg; done
done
for f in /tmp/r/*.txt; do echo "== $(basename $f)"; grep -E "dot4" $f | grep -v attn_k | awk '{print substr($0,1,24), substr($0,34,5), $(NF-7), $(NF-4), $(NF-2), $(NF-1), $NF}'; done
grep -h "route\|clause\|wg" /tmp/r/muse_new_wg192_1.txt | head -5
tar -C /tmp/r -cf $OUT/r.tar .
