. .device/setup.sh
B=/tmp/b/bin
rm -rf /tmp/r; mkdir -p /tmp/r
run() { n=$1; b=$2; shift 2; $B/$b --families dot4 "$@" --x-q8 --json /tmp/r/${n}.json > /tmp/r/${n}.txt 2>&1; }
d() { $B/$1 --synthetic $3 -n $4 --skip-matvec $5 -o /tmp/r/$2.json 2>&1 | grep -iE "decode:|defect|error" | head -2; }
echo "== stats new"; $B/stats_new --types q4_k,q5_k --m 202048 --k 6656 --x-q8 --flavours wgpu 2>&1 | grep -E "Q|wgpu"
for r in 1 2 3; do
 for v in head qh new; do run muse_${v}_$r bench_$v --types q5_k --shapes muse; done
done
for r in 1 2; do
 for v in head new; do run l3_${v}_$r bench_$v --types q4_k,q5_k --shapes llama3-8b; done
done
d compare_head warm llama3-8b 8 ""
for r in 1 2; do
 for v in head new; do echo "l3 $v $r: $(d compare_$v l3d_${v}_$r llama3-8b 64 '')"; done
 for v in head new; do echo "mu $v $r: $(d compare_$v mud_${v}_$r muse-30b 32 '--layers 2')"; done
done
for f in /tmp/r/*.txt; do echo "== $(basename $f)"; grep -E "dot4" $f | grep -v attn_k | awk '{print substr($0,1,24), substr($0,34,5), $(NF-7), $(NF-4), $(NF-2), $(NF-1), $NF}'; done
python3 - <<'P' || true
import json,glob
for f in sorted(glob.glob('/tmp/r/*d_*.json')):
    d=json.load(open(f))['devices'][0]['decode']
    print(f.split('/')[-1], round(d['tok_per_s'],2), [(p[0][:40], round(p[1],3), p[2]) for p in d['pipelines'] if 'q5_k' in p[0] or 'q4_k' in p[0]][:4])
P
tar -C /tmp/r -cf $OUT/r.tar .
