#!/usr/bin/env bash
# Checks a built sagafeed .deb (scripts/package.sh builds it):
#   - its name, control fields and Depends (computed by dpkg-shlibdeps: every
#     library the programs link against, from Debian's packages);
#   - lintian (Debian's checker) finds no error, where it is installed;
#   - its contents: sagafeed, cosmolite, sagafeed-kafka-mock, the example
#     plugin, the example configs, the man pages, the systemd unit, the docs,
#     the alert rules and the dashboard;
#   - the programs, unpacked into a scratch root (or installed with dpkg -i
#     when SF_PKG_INSTALL=1): sagafeed --version, check-config on the installed
#     examples (one loading the installed plugin), cosmolite --help, man -l on
#     the installed pages, systemd-analyze verify on the unit where it works.
# Usage: test_deb.sh FILE.deb VERSION. Prints one line per check, then
# "package: N passed, M failed"; exit status 1 when any failed.
set -uo pipefail
deb=${1:?usage: test_deb.sh FILE.deb VERSION}
version=${2:?usage: test_deb.sh FILE.deb VERSION}
passed=0
failed=0
ok() { echo "ok: $*"; passed=$((passed + 1)); }
bad() { echo "FAIL: $*"; failed=$((failed + 1)); }
try() { # try WHAT COMMAND...: ok when the command succeeds, else its output
    local what=$1 out
    shift
    if out=$("$@" 2>&1); then ok "$what"; else bad "$what"; echo "$out" | tail -20; fi
}
finish() {
    echo "package: $passed passed, $failed failed"
    [ "$failed" = 0 ]
    exit
}

arch=$(dpkg --print-architecture)
[ -f "$deb" ] || { bad "no package $deb"; finish; }
[ "$(basename "$deb")" = "sagafeed_${version}_${arch}.deb" ] && ok "file name $(basename "$deb")" ||
    bad "file name $(basename "$deb"), want sagafeed_${version}_${arch}.deb"

# control fields
info=$(dpkg-deb -I "$deb")
echo "$info" | sed -n 's/^ \(Package\|Version\|Architecture\|Depends\|Recommends\|Installed-Size\):/  \1:/p'
[ "$(dpkg-deb -f "$deb" Package)" = sagafeed ] && ok "Package: sagafeed" || bad "Package field"
[ "$(dpkg-deb -f "$deb" Version)" = "$version" ] && ok "Version: $version" || bad "Version field"
depends=$(dpkg-deb -f "$deb" Depends)
# Depends' package names, one a line (versions and alternatives dropped)
depnames=$(tr ',|' '\n\n' <<<"$depends" | sed 's/(.*//; s/[[:space:]]//g' | grep -v '^$')
# Every library an ELF file of the package links against (NEEDED) comes from a
# package in Depends: what dpkg-shlibdeps is for, checked independently of it.
elfroot=$(mktemp -d "${TMPDIR:-/tmp}/sf-deb-elf-XXXXXX")
dpkg-deb -x "$deb" "$elfroot"
needed=$(find "$elfroot" -type f \( -path '*/bin/*' -o -name '*.so' \) -exec objdump -p {} + 2>/dev/null |
    awk '$1 == "NEEDED" {print $2}' | sort -u)
rm -rf "$elfroot"
[ -n "$needed" ] && ok "NEEDED libraries: $(echo $needed)" || bad "no NEEDED libraries found (objdump -p)"
for lib in $needed; do
    path=$(ldconfig -p | awk -v l="$lib" '$1 == l && /x86-64|64bit|AArch64/ {print $NF; exit}')
    [ -n "$path" ] || path=$(ldconfig -p | awk -v l="$lib" '$1 == l {print $NF; exit}')
    pkg=$( { dpkg -S "$path" 2>/dev/null || dpkg -S "$(readlink -f "$path")" 2>/dev/null; } | head -1 | cut -d: -f1)
    if [ -z "$pkg" ]; then
        bad "$lib ($path): no Debian package provides it"
    elif grep -qx "$pkg" <<<"$depnames"; then
        ok "$lib from $pkg, in Depends"
    else
        bad "$lib comes from $pkg, which Depends lacks: $depends"
    fi
done
[[ ",$depends," == *", adduser,"* || ",$depends," == *",adduser,"* ]] && ok "Depends on adduser (postinst)" || bad "Depends lacks adduser"
echo "$info" | grep -q ' postinst' && ok "has a postinst (the sagafeed user)" || bad "no postinst"

# contents
list=$(dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|')
for f in /usr/bin/sagafeed /usr/bin/cosmolite /usr/bin/sagafeed-kafka-mock \
    /usr/lib/sagafeed/plugins/sf_plugin_loyalty.so \
    /usr/share/doc/sagafeed/examples/order-fulfilment.cfg /usr/share/doc/sagafeed/examples/seat-booking.cfg \
    /usr/share/doc/sagafeed/examples/sagafeed-service.cfg \
    /usr/share/man/man1/sagafeed.1.gz /usr/share/man/man1/cosmolite.1.gz /usr/share/man/man1/sagafeed-kafka-mock.1.gz \
    /usr/share/man/man5/sagafeed.cfg.5.gz \
    /usr/lib/systemd/system/sagafeed.service /usr/share/doc/sagafeed/operations.md \
    /usr/share/doc/sagafeed/configuration.md /usr/share/doc/sagafeed/README.md \
    /usr/share/doc/sagafeed/copyright /usr/share/doc/sagafeed/changelog.gz \
    /usr/share/doc/sagafeed/prometheus/sagafeed.rules.yml /usr/share/doc/sagafeed/grafana/sagafeed-dashboard.json; do
    grep -qx "$f" <<<"$list" && ok "contains $f" || bad "missing $f"
done
top=$(dpkg-deb --fsys-tarfile "$deb" | tar -xOf - ./usr/share/doc/sagafeed/changelog.gz | gzip -dc | head -1)
[[ "$top" == "sagafeed ($version) "* ]] && ok "changelog starts with $version" ||
    bad "changelog's top entry is '$top', the package is $version (packaging/debian/changelog)"
file=$(dpkg-deb --fsys-tarfile "$deb" | tar -xOf - ./usr/bin/sagafeed | file -)
[[ "$file" == *stripped* && "$file" != *"not stripped"* ]] && ok "binaries stripped" || bad "sagafeed not stripped: $file"
echo "contents:"
grep -v '/$' <<<"$list" | sed 's/^/  /'

# Debian's own checker: errors fail, warnings are shown
if command -v lintian >/dev/null 2>&1; then
    out=$(lintian --tag-display-limit 0 "$deb" 2>&1 | grep -v 'running with root privileges')
    [ -n "$out" ] && echo "$out" | sed 's/^/  lintian: /'
    grep -q '^E: ' <<<"$out" && bad "lintian reports errors" || ok "lintian: no errors"
else
    echo "skip: no lintian (apt-get install lintian): the package was not linted"
fi

# the programs
if [ "${SF_PKG_INSTALL:-0}" = 1 ] && dpkg-query -W -f='${Status}' sagafeed 2>/dev/null | grep -q 'install ok installed'; then
    echo "note: a sagafeed package is installed already: unpacking into a scratch root instead of dpkg -i"
    SF_PKG_INSTALL=0
fi
if [ "${SF_PKG_INSTALL:-0}" = 1 ]; then
    root=
    getent passwd sagafeed >/dev/null && had_user="existed before" || had_user="created by postinst"
    try "dpkg -i" dpkg -i "$deb"
    trap 'dpkg -P sagafeed >/dev/null 2>&1' EXIT
    getent passwd sagafeed >/dev/null && ok "the sagafeed user ($had_user)" || bad "no sagafeed user after postinst"
    [ -d /etc/sagafeed ] && ok "postinst made /etc/sagafeed" || bad "no /etc/sagafeed after postinst"
else
    root=$(mktemp -d "${TMPDIR:-/tmp}/sf-deb-XXXXXX")
    trap 'rm -rf "$root"' EXIT
    try "dpkg-deb -x into a scratch root" dpkg-deb -x "$deb" "$root"
fi
bin=$root/usr/bin
v=$("$bin/sagafeed" --version 2>&1)
[ "$v" = "sagafeed $version" ] && ok "sagafeed --version: $v" || bad "sagafeed --version says '$v', the package is $version"
v=$("$bin/cosmolite" --version 2>&1)
[ "$v" = "cosmolite $version" ] && ok "cosmolite --version: $v" || bad "cosmolite --version says '$v', the package is $version"
ex=$root/usr/share/doc/sagafeed/examples
try "sagafeed check-config examples/order-fulfilment.cfg" "$bin/sagafeed" check-config "$ex/order-fulfilment.cfg"
try "sagafeed check-config examples/seat-booking.cfg" "$bin/sagafeed" check-config "$ex/seat-booking.cfg"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sf-deb-cfg-XXXXXX")
cat >"$tmp/plugin.cfg" <<CFG
plugins = [ "$root/usr/lib/sagafeed/plugins/sf_plugin_loyalty.so" ];
workflows = ( { name = "w"; container = "orders"; state_field = "status"; failed_state = "f";
  steps = ( { name = "a"; from = "x"; to = "y";
    do = { kind = "example.loyalty"; container = "c"; id = "x"; partition_key = "x"; points = 1; };
  } ); } );
CFG
try "sagafeed check-config loads the installed plugin" "$bin/sagafeed" check-config "$tmp/plugin.cfg"
rm -rf "$tmp"
try "cosmolite --help" "$bin/cosmolite" --help
try "sagafeed-kafka-mock --help" "$bin/sagafeed-kafka-mock" --help
for page in man1/sagafeed.1.gz man1/cosmolite.1.gz man1/sagafeed-kafka-mock.1.gz man5/sagafeed.cfg.5.gz; do
    out=$(MANWIDTH=80 man --warnings -l "$root/usr/share/man/$page" 2>&1 >/dev/null)
    lines=$(MANWIDTH=80 man -l "$root/usr/share/man/$page" 2>/dev/null | wc -l)
    [ -z "$out" ] && [ "$lines" -gt 20 ] && ok "man -l $page ($lines lines)" || bad "man -l $page: $lines lines, $out"
done
if command -v systemd-analyze >/dev/null 2>&1; then
    # Unpacked, the unit's /usr/bin paths and man: links point into the scratch
    # root; a copy (same name) says so. Warnings (unknown keys, bad values) fail too.
    unit=/usr/lib/systemd/system/sagafeed.service
    if [ -n "$root" ]; then
        mkdir -p "$root/verify"
        sed "s|/usr/bin/|$root/usr/bin/|g" "$root$unit" >"$root/verify/sagafeed.service"
        unit=$root/verify/sagafeed.service
    fi
    if out=$(MANPATH=$root/usr/share/man systemd-analyze verify "$unit" 2>&1) && [ -z "$out" ]; then
        ok "systemd-analyze verify sagafeed.service"
    elif grep -qiE 'Failed to (connect to|initialize manager)|not been booted|Operation not permitted' <<<"$out"; then
        echo "skip: systemd-analyze verify cannot run here: $(head -1 <<<"$out")"
    else
        bad "systemd-analyze verify sagafeed.service"
        echo "$out" | tail -20
    fi
else
    echo "skip: no systemd-analyze: the unit was not verified"
fi
finish
