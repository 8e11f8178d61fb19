set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json BRASS_CACHE=/tmp/bc
mkdir -p $OUT
for b in att_base att_new compare_base compare_new; do xz -dc .bin/att/$b.xz >/tmp/$b; chmod +x /tmp/$b; done
cd /tmp
for i in 1 2 3; do for b in att_base att_new; do
  BRASS_ADAPTER=NVIDIA ./$b decode_attention 2>&1 | grep -E "^test |expected|test result" | sed "s/^/$b $i: /"
done; done | tee $OUT/att.log
for m in llama3-8b gemma3-270m; do for i in 1 2; do for b in compare_base compare_new; do
  ./$b --adapter NVIDIA --synthetic $m --skip-matvec --pp 0 -n 128 -o /tmp/x.json 2>&1 | grep -E "decode at depth" | sed "s/^/$m $b $i: /"
done; done; done | tee $OUT/decode_ab.log
