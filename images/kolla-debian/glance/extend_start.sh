# kolla_extend_start of the glance-api image internal/image builds on
# Debian: sourced by kolla's start.sh, or by `kolla-agent run` in its place
# (bash with start.sh's options, CMD and ARGS set). It does what kolla's
# glance-base and glance-api hooks do.

# glance's log directory
if [[ ! -d /var/log/kolla/glance ]]; then
    mkdir -p /var/log/kolla/glance
fi
if [[ "$(stat -c %a /var/log/kolla/glance)" != "755" ]]; then
    chmod 755 /var/log/kolla/glance
fi

# One-shot runs: the database steps, then the container ends (set, even
# empty, as kolla tests them).
if [[ "${!KOLLA_BOOTSTRAP[@]}" ]]; then
    glance-manage db_sync
    glance-manage db_load_metadefs
    exit 0
fi
if [[ "${!KOLLA_UPGRADE[@]}" ]]; then
    if [[ "${!GLANCE_DB_EXPAND[@]}" ]]; then
        glance-manage db expand
    fi
    if [[ "${!GLANCE_DB_MIGRATE[@]}" ]]; then
        glance-manage db migrate
    fi
    if [[ "${!GLANCE_DB_CONTRACT[@]}" ]]; then
        glance-manage db contract
    fi
    exit 0
fi
