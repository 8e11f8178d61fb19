. .device/setup.sh
B=/tmp/b/bin
rm -rf /tmp/r; mkdir -p /tmp/r
run() { n=$1; b=$2; shift 2; $B/$b --families dot4 "$@" --x-q8 --json /tmp/r/${n}.json > /tmp/r/${n}.txt 2>&1; }
d() { $B/$1 --synthetic muse-30b --layers 2 -n 32 --skip-matvec -o /tmp/r/$2.json 2>&1 | grep -iE "decode:|defect|error" | head -2; }
for v in head new; do echo "== stats $v"; $B/stats_$v --types q5_k --m 202048 --k 6656 --x-q8 --flavours wgpu 2>&1 | tail -3; done
for r in 1 2 3; do
 run muse_head_$r bench_head --types q5_k --shapes muse
 run muse_new_$r bench_new --types q5_k --shapes muse
done
for r in 1 2; do
 run l3_head_$r bench_head --types q5_k --shapes llama3-8b
 run l3_new_$r bench_new --types q5_k --shapes llama3-8b
done
for r in 1 2; do
 echo "mu head $r: $(d compare_head mu_head_$r)"
 echo "mu new $r: $(d compare_new mu_new_$r)"
done
for f in /tmp/r/*.txt; do echo "== $(basename $f)"; grep -E "dot4" $f | grep -v attn_k | awk '{print substr($0,1,24), substr($0,34,5), $(NF-7), $(NF-4), $(NF-2), $(NF-1), $NF}'; done
python3 - <<'P' || true
import json,glob
for f in sorted(glob.glob('/tmp/r/mu_*.json')):
    d=json.load(open(f))['devices'][0]['decode']
    print(f.split('/')[-1], round(d['tok_per_s'],2), [(p[0][:60], round(p[1],3), p[2]) for p in d['pipelines'] if 'q5_k' in p[0]])
P
tar -C /tmp/r -cf $OUT/r.tar .
