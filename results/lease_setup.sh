# Sourced by lease scripts on the device machine, from the checkout's root: the Vulkan
# loader from the carried .gl debs, the NVIDIA driver, brass's cache and adapter, the
# checkout at /work/main (where test binaries look for tests/reference), and each
# carried .bin/$1/*.xz unpacked into /tmp/$2 (default /tmp).
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export BRASS_CACHE=${BRASS_CACHE:-/tmp/bc} BRASS_ADAPTER=NVIDIA
mkdir -p /work && ln -sfn "$PWD" /work/main
unpack_bin() {
    mkdir -p "$2"
    for f in .bin/"$1"/*.xz; do
        t="$2/$(basename "$f" .xz)"; [ -x "$t" ] || { xz -dc "$f" >"$t"; chmod +x "$t"; }
    done
}
