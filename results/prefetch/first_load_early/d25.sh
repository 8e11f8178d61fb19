. .device/setup.sh
B=/tmp/b/bin
mkdir -p /tmp/r
run() { n=$1; b=$2; shift 2; $B/$b --families dot4 --types q4_k,q5_k --shapes llama3-8b "$@" --json /tmp/r/${n}.json > /tmp/r/${n}.txt 2>&1; }
for r in 1 2; do
 run head_$r bench_head --x-q8
 run headp_$r bench_head --x-q8 --prefetch true
 run early_$r bench_early --x-q8
 run earlyp_$r bench_early --x-q8 --prefetch true
done
for f in /tmp/r/*.txt; do echo "== $(basename $f)"; grep -E "dot4" $f | grep -v attn_k | awk '{print substr($0,1,24), substr($0,34,5), $(NF-7), $(NF-4), $(NF-2), $(NF-1), $NF}'; done
tar -C /tmp/r -cf $OUT/r.tar .
