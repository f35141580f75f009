# kolla_extend_start of the nova-conductor image internal/image builds on
# Debian: sourced by kolla's start.sh, or by `kolla-agent run` in its place.
# It does what kolla's nova-base hook does: nova's log directory.
if [[ ! -d /var/log/kolla/nova ]]; then
    mkdir -p /var/log/kolla/nova
fi
if [[ "$(stat -c %a /var/log/kolla/nova)" != "755" ]]; then
    chmod 755 /var/log/kolla/nova
fi
