# Pools the per-variant error files (examples/int8_tail --errors-dir) of the seven
# sequences of tests/reference/smollm2_q4_1_prompts.json and prints every table of
# results/int8_tail/README.md's 2026-12-04 section. Run in the folder holding the
# err_*/ fa0_*/ jit_*/ dith_*/ many_chat/ directories the commands there write.
import glob, math, os, statistics as st
names = ['france', 'code_fib', 'chat_water', 'story', 'primes', 'json', 'softmax']
# llama.cpp's variant file (its name follows the report's label, which changed once).
LC = os.path.basename(glob.glob('err_france/llama_cpp__*.txt')[0])
def q(v, p):
    v = sorted(v); return v[min(len(v) - 1, int(p * len(v)))]
def errs(fn):
    return [(float(l.split()[2]), int(l.split()[0])) for l in open(fn)]
def pooled(fn):
    out, worst = [], (0, '', 0)
    for n in names:
        for e, p in errs(fn(n)):
            out.append(e)
            if e > worst[0]: worst = (e, n, p)
    return out, worst
def line(name, fn):
    v, w = pooled(fn)
    print(f"{name:34s} median {st.median(v):.4f} p90 {q(v,.9):.3f} p99 {q(v,.99):.3f} worst {w[0]:.3f} ({w[1]}@{w[2]})")
    return st.median(v), q(v, .99), w[0]
print("== per sequence: worst / median (GPU default route, lavapipe subgroup 8; llama.cpp FA on; FA off)")
for n in names:
    b = [e for e, _ in errs(f'err_{n}/gpu_default.txt')]
    l = [e for e, _ in errs(f'err_{n}/{LC}')]
    f = [e for e, _ in errs(f'fa0_{n}/{LC}')]
    print(f"{n:11s} {len(b)//5:3d} positions: brass {max(b):.3f} / {st.median(b):.3f}   llama.cpp {max(l):.3f} / {st.median(l):.3f}   FA off {max(f):.3f} / {st.median(f):.3f}")
print("== pooled, 1,430 logits")
line('brass GPU default (lavapipe sg 8)', lambda n: f'err_{n}/gpu_default.txt')
line('llama.cpp CPU, flash attention on', lambda n: f'err_{n}/{LC}')
line('llama.cpp CPU, flash attention off', lambda n: f'fa0_{n}/{LC}')
for s in ('Brass', 'Llama'):
    for j in range(6):
        line(f'cpu {s} x jitter 1e-6 seed {j}', lambda n: f'jit_{n}/cpu_{s}_mask_0b11111_jitter_{j}.txt')
for s in ('Brass', 'Llama'):
    for j in range(1, 9):
        line(f'cpu {s} dither 0.01 seed {j}', lambda n: f'dith_{n}/cpu_{s}_dither_0_01_seed_{j}.txt')
print("== chat prompt, positions 19 and 20, 20 jitter draws (per-position worst)")
def at(fn, pos): return max(e for e, p in errs(fn) if p == pos)
for pos in (19, 20):
    for s in ('Brass', 'BrassF16d', 'Llama'):
        v = [at(f'many_chat/cpu_{s}_all_kv_f16_jitter_{j}.txt', pos) for j in range(1, 21)]
        print(f"pos {pos} {s:9s} mean {st.mean(v):.3f} sd {st.stdev(v):.3f}")
print("== hardest positions (mean over the six jitter draws of each scheme's per-position worst)")
rows = []
for n in names:
    def pw(fn):
        d = {}
        for e, p in errs(fn): d[p] = max(d.get(p, 0), e)
        return d
    B = [pw(f'jit_{n}/cpu_Brass_mask_0b11111_jitter_{j}.txt') for j in range(6)]
    L = [pw(f'jit_{n}/cpu_Llama_mask_0b11111_jitter_{j}.txt') for j in range(6)]
    for p in B[0]:
        b = st.mean(x[p] for x in B); l = st.mean(x[p] for x in L)
        rows.append((b + l, b, l))
rows.sort(reverse=True)
for N in (10, 20, 40, 100, len(rows)):
    r = rows[:N]
    g = math.exp(st.mean(math.log(x[1] / x[2]) for x in r))
    print(f"hardest {N:3d}: brass's arithmetic worse at {sum(x[1] > x[2] for x in r)}, geometric mean ratio {g:.3f}")
print("== issue 22's 45 logits (positions 0-9 of the France sequence, ids in both references' top-5)")
import json
repo = os.environ.get('REPO', '/work/main')
ex = json.load(open(f'{repo}/tests/reference/smollm2_q4_1_f64.json'))
ll = json.load(open(f'{repo}/tests/reference/smollm2_q4_1_llamacpp.json'))
pairs = {(p, i) for p in range(10) for i, _ in ex['steps'][p]['top']
         if i in {j for j, _ in ll['steps'][p]['top']}}
for name, fn in (('brass GPU default (sg 8)', 'err_france/gpu_default.txt'),
                 ('llama.cpp, flash attention on', f'err_france/{LC}'),
                 ('llama.cpp, flash attention off', f'fa0_france/{LC}')):
    d = {(int(l.split()[0]), int(l.split()[1])): float(l.split()[2]) for l in open(fn)}
    v = [d[k] for k in pairs]
    print(f"{name:32s} {len(v)} logits: worst {max(v):.4f} median {st.median(v):.4f}")
