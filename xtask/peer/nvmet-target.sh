#!/bin/sh
# Linux's own NVMe/RDMA target (nvmet-rdma over rxe0), configured through
# configfs in the Linux peer guest: the reference the project's target is
# measured against (issue #32, scenario nvme-linux-reference).
#
# Environment:
#   NVME_ADDR  the address to listen on (this guest's IPv4 address)
#   NVME_NQN   the NVM subsystem NQN
#   NVME_PORT  RDMA-CM port (default 4420)
#   NVME_NS_MB namespace size in MiB (default 64), a RAM disk (brd, 512 B
#              logical blocks), loaded here with its size
#
# Prints `NVMET PASS configured …` (or `NVMET FAIL …` and exits 1), then
# serves until the guest is powered off (`NVMET_SERVE_S`, default 600 s).
# configfs attributes: Linux 6.1 drivers/nvme/target/configfs.c (subsystems/NQN/
# attr_allow_any_host, namespaces/N/{device_path,enable},
# ports/N/{addr_traddr,addr_trtype,addr_trsvcid,addr_adrfam}, the
# subsystems/ link that enables the port).

PORT=${NVME_PORT:-4420}
MB=${NVME_NS_MB:-64}
die() {
    echo "NVMET FAIL $1"
    exit 1
}
[ -n "$NVME_ADDR" ] && [ -n "$NVME_NQN" ] || die "NVME_ADDR and NVME_NQN must be set"
insmod /modules/opt/brd.ko rd_nr=1 rd_size=$((MB * 1024)) || die "insmod brd"
[ -b /dev/ram0 ] || die "no /dev/ram0"
mkdir -p /sys/kernel/config
mount -t configfs none /sys/kernel/config 2>/dev/null
T=/sys/kernel/config/nvmet
[ -d $T ] || die "no $T (nvmet not loaded?)"
S=$T/subsystems/$NVME_NQN
mkdir $S || die "mkdir $S"
echo 1 >$S/attr_allow_any_host || die attr_allow_any_host
mkdir $S/namespaces/1 || die "mkdir namespace"
echo -n /dev/ram0 >$S/namespaces/1/device_path || die device_path
echo 1 >$S/namespaces/1/enable || die "namespace enable"
P=$T/ports/1
mkdir $P || die "mkdir port"
echo "$NVME_ADDR" >$P/addr_traddr
echo rdma >$P/addr_trtype
echo "$PORT" >$P/addr_trsvcid
echo ipv4 >$P/addr_adrfam
ln -s $S $P/subsystems/"$NVME_NQN" || die "port link (nvmet-rdma listen)"
echo "NVMET PASS configured $NVME_NQN on $NVME_ADDR:$PORT, $MB MiB ram0"
# serve; the harness powers this guest off once the host is done
sleep "${NVMET_SERVE_S:-600}"
