. .device/setup.sh
B=/tmp/b/bin
rm -rf /tmp/r; mkdir -p /tmp/r
run() { n=$1; b=$2; shift 2; $B/$b --families dot4 "$@" --x-q8 --json /tmp/r/${n}.json > /tmp/r/${n}.txt 2>&1; }
d() { $B/$1 --synthetic smollm2-135m --mix q4_1 -n 128 --skip-matvec -o /tmp/r/$2.json 2>&1 | grep -iE "decode:" | head -1; }
for r in 1 2; do
 run muse_head_$r bench_head --types q5_k --shapes muse
 run muse_new_$r bench_new --types q5_k --shapes muse
 echo "sm head $r: $(d compare_head sm_head_$r)"
 echo "sm new $r: $(d compare_new sm_new_$r)"
done
run l3_head bench_head --types q4_k,q6_k,q8_0 --shapes llama3-8b
run l3_new bench_new --types q4_k,q6_k,q8_0 --shapes llama3-8b
for f in /tmp/r/*.txt; do echo "== $(basename $f)"; grep -E "dot4" $f | grep -v attn_k | awk '{print substr($0,1,24), substr($0,34,5), $(NF-7), $(NF-4), $(NF-2)}'; done
tar -C /tmp/r -cf $OUT/r.tar .
