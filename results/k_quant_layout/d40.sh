. .device/setup.sh
B=/tmp/b/bin
rm -rf /tmp/r; mkdir -p /tmp/r
run() { n=$1; b=$2; shift 2; $B/$b --families dot4 "$@" --x-q8 --json /tmp/r/${n}.json > /tmp/r/${n}.txt 2>&1; }
for r in 1 2; do
 for v in new t2 lo t2lo; do run muse_${v}_$r bench_$v --types q5_k --shapes muse; done
done
for f in /tmp/r/*.txt; do echo "== $(basename $f)"; grep -E "dot4" $f | awk '{print substr($0,1,24), substr($0,34,5), $(NF-7), $(NF-4), $(NF-2), $(NF-1), $NF}'; done
grep -h "streaming read" /tmp/r/muse_new_1.txt
tar -C /tmp/r -cf $OUT/r.tar .
