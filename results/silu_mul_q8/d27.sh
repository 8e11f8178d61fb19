. .device/setup.sh
B=/tmp/b/bin
rm -rf /tmp/r; mkdir -p /tmp/r
d() { echo "== $1 $2"; $B/compare --synthetic $1 -n $3 --skip-matvec $4 -o /tmp/r/$2.json 2>&1 | grep -iE "decode:|defect|error" | head -3; }
d llama3-8b l3_warm 8 ""
for i in 1 2 3; do
 d llama3-8b l3_q8_$i 64 "--glu-q8 true"
 d llama3-8b l3_glu_$i 64 "--glu-q8 false"
done
for i in 1 2; do
 d smollm2-135m sm_q8_$i 128 "--mix q4_1 --glu-q8 true"
 d smollm2-135m sm_glu_$i 128 "--mix q4_1 --glu-q8 false"
done
for i in 1 2; do
 d muse-30b mu_q8_$i 32 "--layers 2 --glu-q8 true"
 d muse-30b mu_glu_$i 32 "--layers 2 --glu-q8 false"
done
python3 - <<'P' || true
import json,glob
for f in sorted(glob.glob('/tmp/r/*.json')):
    d=json.load(open(f))['devices'][0]['decode']
    print(f.split('/')[-1], round(d['tok_per_s'],2), [(p[0][:48], round(p[1],3), p[2]) for p in d['pipelines'] if 'silu' in p[0] or 'glu' in p[0] or 'tile14336' in p[0] or 'tile17920' in p[0]])
P
tar -C /tmp/r -cf $OUT/r.tar .
