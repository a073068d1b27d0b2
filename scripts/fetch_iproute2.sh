#!/usr/bin/env bash
# Download Debian 12's iproute2 (ip, tc) and the libraries it needs as .deb files into a folder
# (default .iproute2/, git-ignored), for machines that have root and network namespaces but no
# iproute2 (the lent GPU machines). Nothing is installed: `python -m studykit throttle --iproute2 DIR`
# (or STUDYKIT_IPROUTE2=DIR) unpacks them with `dpkg -x` into a temporary folder and runs ip/tc from
# there; the measurement processes never load these libraries. About 3 MB; needs apt-get and a mirror.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${1:-.iproute2}
mkdir -p "$DEST"
cd "$DEST"
apt-get download iproute2 libbpf1 libbsd0 libcap2 libdb5.3 libelf1 libmnl0 libselinux1 libtirpc3 \
  libxtables12 libatm1 libmd0 libpcre2-8-0 libzstd1 zlib1g 2>&1 | grep -v "unsandboxed" || true
ls -1 ./*.deb | wc -l | xargs echo "fetch_iproute2: .deb files in $DEST:"
