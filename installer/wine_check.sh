#!/usr/bin/env bash
# By-hand check of the installer LOGIC under Debian's wine64 (not run by CI): a tiny dummy payload stands
# in for the Windows bundle (PyInstaller cannot cross-build). Uses the 64-bit NSIS stub, because wine64
# without the i386 wine packages cannot run the usual 32-bit one. Steps:
#   a folder holding another program's _internal refused; fresh install (/S) -> files, shortcuts, uninstall entry; upgrade 0.1.0 -> 0.2.0 in place (stale file
#   removed, a desktop shortcut the user deleted not recreated); silent uninstall keeps user data; silent uninstall
#   with /PURGE removes it.
# Usage: installer/wine_check.sh   (needs: apt-get install wine64 nsis; takes about a minute)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="$(mktemp -d /tmp/halo-wine.XXXXXX)"
export WINEPREFIX="$WORK/prefix" WINEDEBUG=-all WINEDLLOVERRIDES="mscoree,mshtml="
WINE="$(command -v wine64 || echo /usr/lib/wine/wine64)"
WINESERVER="$(command -v wineserver || echo /usr/lib/wine/wineserver)"
PY="$ROOT/.venv/bin/python"
fail() { echo "FAIL: $*"; exit 1; }
ok() { echo "ok: $*"; }

payload() {   # payload DIR VERSION EXTRA_FILE
  mkdir -p "$1/_internal"
  printf 'MZ dummy %s' "$2" > "$1/HaloChat.exe"
  printf '%s' "$2" > "$1/_internal/VERSION.txt"
  printf 'x' > "$1/_internal/$3"
}
make_setup() {   # make_setup PAYLOAD VERSION OUT
  "$PY" - "$@" <<PYEOF
import sys; sys.path.insert(0, "$ROOT")
from pathlib import Path
from installer.build import build_installer
build_installer(Path(sys.argv[1]), Path(sys.argv[3]), version=sys.argv[2], check_only=False, amd64=True)
PYEOF
}
run() { "$WINE" "$@" >/dev/null 2>&1; }

payload "$WORK/p1" 0.1.0 only-in-0.1.0.pyd
payload "$WORK/p2" 0.2.0 only-in-0.2.0.pyd
make_setup "$WORK/p1" 0.1.0 "$WORK/HaloChat-Setup-0.1.0.exe"
make_setup "$WORK/p2" 0.2.0 "$WORK/HaloChat-Setup-0.2.0.exe"

start=$(date +%s)
run wineboot --init
echo "wine prefix ready in $(( $(date +%s) - start )) s"
LOCAL="$WINEPREFIX/drive_c/users/$(id -un)/AppData/Local"
ROAMING="$WINEPREFIX/drive_c/users/$(id -un)/AppData/Roaming"
INST="$LOCAL/Programs/Halo Chat"
KEY='HKCU\Software\Microsoft\Windows\CurrentVersion\Uninstall\HaloChat'
reg_value() { "$WINE" reg query "$KEY" /v "$1" 2>/dev/null | tr -d '\r' | awk -v n="$1" '$1==n {$1="";$2=""; sub(/^ +/,""); print}'; }

# A folder that holds another PyInstaller app's _internal: refused, nothing of it touched.
FOREIGN="$WINEPREFIX/drive_c/Tools"
mkdir -p "$FOREIGN/_internal" && printf 'x' > "$FOREIGN/_internal/other.dll" && printf 'MZ' > "$FOREIGN/other.exe"
if run "$WORK/HaloChat-Setup-0.1.0.exe" /S "/D=C:\\Tools"; then fail "installed into another program's folder"; fi
[ -f "$FOREIGN/_internal/other.dll" ] && [ ! -e "$FOREIGN/HaloChat.exe" ] || fail "another program's files were touched"
[ -z "$(reg_value DisplayVersion)" ] || fail "a refused install wrote an uninstall entry"
ok "a folder holding another program's _internal is refused, its files untouched"

run "$WORK/HaloChat-Setup-0.1.0.exe" /S
[ -f "$INST/HaloChat.exe" ] && [ -f "$INST/_internal/only-in-0.1.0.pyd" ] || fail "program files after install"
[ -f "$INST/Uninstall Halo Chat.exe" ] || fail "uninstaller after install"
[ -f "$ROAMING/Microsoft/Windows/Start Menu/Programs/Halo Chat.lnk" ] || fail "start menu shortcut"
[ "$(reg_value DisplayVersion)" = 0.1.0 ] || fail "DisplayVersion after install: $(reg_value DisplayVersion)"
ok "install 0.1.0: files, uninstaller, Start menu shortcut, uninstall entry (DisplayVersion $(reg_value DisplayVersion), EstimatedSize $(reg_value EstimatedSize), QuietUninstallString $(reg_value QuietUninstallString))"
# wine turns a desktop .lnk into a freedesktop "Halo Chat.desktop" file, so that one is checked by name.
[ -e "$LOCAL/../../Desktop/Halo Chat.desktop" ] || [ -e "$LOCAL/../../Desktop/Halo Chat.lnk" ] || fail "desktop shortcut"
ok "desktop shortcut (default component) created"

mkdir -p "$LOCAL/Halo Chat/models" && printf 'model' > "$LOCAL/Halo Chat/models/mine.gguf"
rm -f "$LOCAL/../../Desktop/Halo Chat.desktop" "$LOCAL/../../Desktop/Halo Chat.lnk"    # the user deletes it
run "$WORK/HaloChat-Setup-0.2.0.exe" /S
[ "$(cat "$INST/_internal/VERSION.txt")" = 0.2.0 ] || fail "upgrade did not replace files"
[ ! -e "$INST/_internal/only-in-0.1.0.pyd" ] || fail "upgrade left a stale file"
[ "$(reg_value DisplayVersion)" = 0.2.0 ] || fail "DisplayVersion after upgrade"
ok "upgrade 0.1.0 -> 0.2.0 in place: new files, stale file gone, DisplayVersion 0.2.0"
[ ! -e "$LOCAL/../../Desktop/Halo Chat.desktop" ] && [ ! -e "$LOCAL/../../Desktop/Halo Chat.lnk" ] \
  || fail "the upgrade brought back the desktop shortcut the user had deleted"
ok "a desktop shortcut the user deleted stays deleted on upgrade"

# The uninstaller copies itself to TEMP, starts that copy and returns at once (as on Windows); `wineserver
# -w` waits for every process of the prefix to end.
run "$INST/Uninstall Halo Chat.exe" /S; "$WINESERVER" -w
[ ! -e "$INST/HaloChat.exe" ] && [ ! -e "$INST/_internal" ] || fail "program files left after uninstall"
[ ! -e "$ROAMING/Microsoft/Windows/Start Menu/Programs/Halo Chat.lnk" ] || fail "shortcut left after uninstall"
[ -z "$(reg_value DisplayVersion)" ] || fail "uninstall entry left"
[ -f "$LOCAL/Halo Chat/models/mine.gguf" ] || fail "silent uninstall removed the user's models"
ok "silent uninstall: program, shortcut and uninstall entry removed; user data kept"

run "$WORK/HaloChat-Setup-0.2.0.exe" /S
mkdir -p "$ROAMING/Halo Chat" && printf '[General]' > "$ROAMING/Halo Chat/Halo Chat.ini"
run "$INST/Uninstall Halo Chat.exe" /S /PURGE; "$WINESERVER" -w
[ ! -e "$LOCAL/Halo Chat" ] && [ ! -e "$ROAMING/Halo Chat" ] || fail "/PURGE left user data"
ok "silent uninstall /PURGE: conversations, models and settings removed"
"$WINESERVER" -w
echo "wine check passed in $(( $(date +%s) - start )) s"
rm -rf "$WORK"
