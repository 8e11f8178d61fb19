. .device/setup.sh
B=/tmp/b/bin
mkdir -p /tmp/r
run() { n=$1; b=$2; shift 2; $B/$b --families dot4 --types q5_k "$@" --x-q8 --json /tmp/r/${n}.json > /tmp/r/${n}.txt 2>&1; }
for r in 1 2 3; do
 run muse_s4_$r bench_new --shapes muse
 run muse_s2_$r bench_s2 --shapes muse
 run muse_s2l4_$r bench_s2 --shapes muse --coop-lanes 4
 run muse_s2l16_$r bench_s2 --shapes muse --coop-lanes 16
done
for r in 1 2; do
 run l3_s4_$r bench_new --shapes llama3-8b
 run l3_s2_$r bench_s2 --shapes llama3-8b
 run l3_s2np_$r bench_s2 --shapes llama3-8b --prefetch false
done
for f in /tmp/r/*.txt; do echo "== $(basename $f)"; grep -E "dot4" $f | grep -v attn_k | awk '{print substr($0,1,24), $(NF-7), $(NF-4), $(NF-2), $(NF-1), $NF}'; done
tar -C /tmp/r -cf $OUT/r.tar .
