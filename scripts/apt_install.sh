# Sourced by scripts/bootstrap*.sh: apt_install PACKAGE... installs the missing ones (as root),
# with no service started by the install (policy-rc.d), or says which it could not install.

apt_install() {
    local missing=() package
    for package in "$@"; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' \
            || missing+=("$package")
    done
    ((${#missing[@]})) || return 0
    if [ "$(id -u)" -ne 0 ]; then
        echo "bootstrap: not root, so not installing ${missing[*]}; what needs them will say so" >&2
        return 0
    fi
    echo "bootstrap: installing ${missing[*]}"
    # policy-rc.d exit 101: the maintainer scripts start no service (deb-systemd-invoke and
    # invoke-rc.d ask it); one already there is kept.
    local policy=/usr/sbin/policy-rc.d placed=""
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod 0755 "$policy" && placed=1
    fi
    local status=0
    apt-get update -q \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
            "${missing[@]}" \
        || status=$?
    if [ -n "$placed" ]; then rm -f "$policy"; fi
    return $status
}
