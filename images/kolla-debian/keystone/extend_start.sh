# kolla_extend_start of the keystone image internal/image builds on Debian:
# sourced by kolla's start.sh, or by `kolla-agent run` in its place (bash,
# errexit, pipefail, CMD and ARGS set). It does what kolla's keystone hook
# and kolla_httpd_setup do for apache on Debian.

# keystone's log directory, the keystone user's, group kolla
KEYSTONE_LOG_DIR=/var/log/kolla/keystone
if [[ ! -d "${KEYSTONE_LOG_DIR}" ]]; then
    mkdir -p "${KEYSTONE_LOG_DIR}"
fi
if [[ "$(stat -c %U:%G "${KEYSTONE_LOG_DIR}")" != "keystone:kolla" ]]; then
    chown keystone:kolla "${KEYSTONE_LOG_DIR}"
fi
if [[ ! -f "${KEYSTONE_LOG_DIR}/keystone.log" ]]; then
    touch "${KEYSTONE_LOG_DIR}/keystone.log"
    chown keystone:keystone "${KEYSTONE_LOG_DIR}/keystone.log"
fi
chmod 755 "${KEYSTONE_LOG_DIR}"

# One-shot runs: the database steps as the keystone user, then the
# container ends (set, even empty, as kolla tests them).
if [[ "${!KOLLA_UPGRADE[@]}" ]]; then
    runuser -u keystone -- keystone-manage db_sync --expand
    runuser -u keystone -- keystone-manage db_sync --migrate
    exit 0
fi
if [[ "${!KOLLA_FINISH_UPGRADE[@]}" ]]; then
    runuser -u keystone -- keystone-manage db_sync --contract
    exit 0
fi
if [[ "${!KOLLA_BOOTSTRAP[@]}" ]]; then
    runuser -u keystone -- keystone-manage db_sync
    exit 0
fi

# apache on Debian reads its environment from /etc/apache2/envvars
# (apache2ctl does); its run directory starts empty.
if [[ "$(id -u)" -eq 0 ]]; then
    APACHE_CONFDIR=""
    . /etc/apache2/envvars
fi
install -d /var/run/apache2 "${APACHE_LOCK_DIR:-/var/lock/apache2}"
rm -rf /var/run/apache2/*
