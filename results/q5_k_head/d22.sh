. .device/setup.sh
B=/tmp/b/bin
mkdir -p /tmp/r
run() { n=$1; shift; $B/bench_new --families dot4 --types q5_k --shapes muse --x-q8 "$@" --json /tmp/r/sw_${n}.json > /tmp/r/sw_${n}.txt 2>&1; }
for r in 1 2; do
 run base_$r
 run g1056_$r --coop-groups 1056
 run g2112_$r --coop-groups 2112
 run g4224_$r --coop-groups 4224
 run g768_$r --coop-groups 768
 run wg128_$r --coop-wg 128
 run wg128g2112_$r --coop-wg 128 --coop-groups 2112
 run wg512_$r --coop-wg 512 --coop-groups 512
 run l16_$r --coop-lanes 16
 run l4_$r --coop-lanes 4
done
for f in /tmp/r/sw_*.txt; do echo "$(basename $f) $(grep -E "dot4" $f | awk '{print $(NF-7), $(NF-4), $(NF-2), $(NF-1), $NF}')"; done
grep -A3 "clauses\|reason" /tmp/r/sw_base_1.txt | head; tail -5 /tmp/r/sw_base_1.txt
tar -C /tmp/r -cf $OUT/r.tar .
