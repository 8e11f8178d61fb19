. .device/setup.sh
B=/tmp/b/bin
rm -rf /tmp/r; mkdir -p /tmp/r
run() { n=$1; shift 1; $B/bench_new --families dot4 "$@" --json /tmp/r/${n}.json > /tmp/r/${n}.txt 2>&1; }
for r in 1 2; do
 for wg in 256 288 320 384 512; do run muse_wg${wg}_$r --types q5_k --shapes muse --x-q8 --coop-wg $wg; done
done
for wg in 256 384 288; do
 run l3q8_wg${wg} --types q8_0 --shapes llama3-8b --coop-wg $wg
 run l3k_wg${wg} --types q4_k,q5_k,q6_k --shapes llama3-8b --x-q8 --coop-wg $wg
done
for f in /tmp/r/*.txt; do echo "== $(basename $f)"; grep -E "dot4" $f | grep -v attn_k | awk '{print substr($0,1,24), substr($0,34,5), substr($0,53,40), $(NF-7), $(NF-4), $(NF-2), $(NF-1), $NF}'; done
grep -h "streaming read" /tmp/r/muse_wg256_1.txt
tar -C /tmp/r -cf $OUT/r.tar .
