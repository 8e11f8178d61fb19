. .device/setup.sh
B=/tmp/b/bin
mkdir -p /tmp/r
for r in 1 2 3; do
 for p in true false; do
  $B/bench_new --families dot4 --types q5_k --shapes muse --x-q8 --prefetch $p --json /tmp/r/muse_p${p}_$r.json > /tmp/r/muse_p${p}_$r.txt 2>&1
 done
done
for r in 1 2; do
 for v in new old; do
  $B/bench_$v --families dot4 --types q4_k,q5_k,q6_k,q8_0,q4_0 --shapes llama3-8b --x-q8 --json /tmp/r/l3_${v}_$r.json > /tmp/r/l3_${v}_$r.txt 2>&1
 done
done
for f in /tmp/r/*.txt; do echo "== $f"; grep -E "dot4" $f | grep -v attn_k | awk '{print substr($0,8,24), substr($0,34,5), $(NF-7), $(NF-4), $(NF-2), $(NF-1), $NF}'; done
grep -i probe /tmp/r/muse_ptrue_1.txt | head -3
tar -C /tmp/r -cf $OUT/r.tar .
