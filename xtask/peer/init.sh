#!/bin/sh
# /init of the Linux peer's initramfs (`cargo xtask peer`, issue #34).
# Brings up Soft-RoCE (rxe0) on eth0 with the addresses QEMU passes in
# fw_cfg (opt/irdma/env), runs the scenario script (opt/irdma/run), prints
# `PEER-EXIT <status>` and powers off. Facts: shared/notes/linux-peer.md.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mkdir -p /tmp /run
for m in /modules/*.ko; do
    insmod "$m" || echo "peer: insmod $m failed"
done
CFG=/sys/firmware/qemu_fw_cfg/by_name/opt/irdma
if [ ! -r $CFG/env/raw ]; then
    echo "peer: no fw_cfg opt/irdma/env"; echo "PEER-EXIT 125"; poweroff -f
fi
set -a
. $CFG/env/raw
set +a
# NVMe over RDMA (issue #32): the host's and target's modules only when
# asked (NVME=1), and a stable host identity for nvme-cli
if [ "$NVME" = 1 ]; then
    for m in /modules/nvme/*.ko; do
        insmod "$m" || echo "peer: insmod $m failed"
    done
    mkdir -p /etc/nvme
    HOSTID=${NVME_HOSTID:-5e2d0c1a-0b0b-4c32-8e00-00000000000b}
    echo "nqn.2014-08.org.nvmexpress:uuid:$HOSTID" >/etc/nvme/hostnqn
    echo "$HOSTID" >/etc/nvme/hostid
fi
# busybox's `ip` applet is not linked: this is iproute2's
IP=/usr/sbin/ip
$IP link set lo up
$IP link set eth0 mtu "${MTU:-1500}" up
# with VLAN set, the addresses live on the 802.1Q interface eth0.$VLAN
DEV=eth0
if [ -n "$VLAN" ]; then
    DEV=eth0.$VLAN
    $IP link add link eth0 name $DEV type vlan id "$VLAN"
    $IP link set $DEV up
fi
$IP addr add "$PEER_IP/24" dev $DEV
[ -n "$PEER_IP6" ] && $IP -6 addr add "$PEER_IP6/64" dev $DEV nodad
[ -n "$NEIGH_PERMANENT" ] && $IP neigh replace "$MODEL_IP" lladdr "$MODEL_MAC" dev $DEV nud permanent
rdma link add rxe0 type rxe netdev eth0
i=0
while [ $i -lt 300 ]; do
    if [ "$(cat /sys/class/net/eth0/carrier 2>/dev/null)" = 1 ] &&
        [ -r /sys/class/infiniband/rxe0/ports/1/gids/1 ] &&
        ! grep -q '^0000:0000:0000:0000:0000:0000:0000:0000$' /sys/class/infiniband/rxe0/ports/1/gids/1; then
        break
    fi
    sleep 0.1
    i=$((i + 1))
done
echo "PEER-READY $(cut -d' ' -f1 /proc/uptime) s gid1=$(cat /sys/class/infiniband/rxe0/ports/1/gids/1 2>/dev/null)"
cat $CFG/run/raw > /tmp/run.sh
sh /tmp/run.sh
rc=$?
echo "PEER-EXIT $rc"
poweroff -f
