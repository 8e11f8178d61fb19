. .device/setup.sh
B=/tmp/b/bin
rm -rf /tmp/r; mkdir -p /tmp/r
d() { echo "== $1 $2 $3"; $B/$1 --synthetic $2 -n $4 --skip-matvec $5 -o /tmp/r/$3.json 2>&1 | grep -iE "decode:|defect|error" | head -3; }
d compare_new llama3-8b l3_warm 8 ""
for i in 1 2; do
 d compare_new llama3-8b l3_new_$i 64 ""
 d compare_old llama3-8b l3_old_$i 64 ""
done
for i in 1 2; do
 d compare_new smollm2-135m sm_new_q8norms_$i 128 "--mix q4_1 --x-q8 true"
 d compare_old smollm2-135m sm_old_q8norms_$i 128 "--mix q4_1 --x-q8 true"
done
python3 - <<'P' || true
import json,glob
for f in sorted(glob.glob('/tmp/r/*.json')):
    d=json.load(open(f))['devices'][0]['decode']
    print(f.split('/')[-1], round(d['tok_per_s'],2), [(p[0][:40], round(p[1],3), p[2]) for p in d['pipelines'] if 'norm' in p[0] or 'silu' in p[0]])
P
tar -C /tmp/r -cf $OUT/r.tar .
