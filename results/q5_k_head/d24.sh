. .device/setup.sh
B=/tmp/b/bin
mkdir -p /tmp/r
run() { n=$1; b=$2; shift 2; $B/$b --families dot4 --types q5_k "$@" --json /tmp/r/${n}.json > /tmp/r/${n}.txt 2>&1; }
for r in 1 2 3; do
 run muse_base_$r bench_new --shapes muse --x-q8
 run muse_direct_$r bench_new --shapes muse --x-direct
 run muse_directg_$r bench_new --shapes muse --x-direct --coop-groups 1024
 run muse_directl16_$r bench_new --shapes muse --x-direct --coop-lanes 16
done
for f in /tmp/r/*.txt; do echo "== $(basename $f)"; grep -E "dot4" $f | grep -v attn_k | awk '{print substr($0,1,24), $(NF-7), $(NF-4), $(NF-2), $(NF-1), $NF}'; done
grep dot4 /tmp/r/muse_direct_1.txt
tar -C /tmp/r -cf $OUT/r.tar .
