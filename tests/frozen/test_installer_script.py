"""The NSIS script compiles (makensis, warnings are errors) around the frozen bundle and a small payload.
On Linux this checks the script, not a Windows installer (PyInstaller cannot cross-build)."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from installer import build

pytestmark = [pytest.mark.frozen,
              pytest.mark.skipif(shutil.which("makensis") is None, reason="makensis missing: apt-get install nsis")]


def _payload(tmp_path):
    folder = tmp_path / "payload"
    (folder / "_internal").mkdir(parents=True)
    (folder / "HaloChat.exe").write_bytes(b"MZ not really")
    (folder / "_internal" / "library.dll").write_bytes(b"\0" * 1024)
    return folder


def test_script_compiles_around_a_payload(tmp_path):
    setup = build.build_installer(_payload(tmp_path), tmp_path / build.installer_name("1.2.3"), version="1.2.3")
    data = setup.read_bytes()
    assert data[:2] == b"MZ"
    assert "Halo Chat".encode("utf-16-le") in data            # the version resource's product name


def test_script_refuses_to_compile_without_its_defines(tmp_path):
    result = subprocess.run([build.find_makensis(), "-V2", str(build.NSIS_SCRIPT)], capture_output=True,
                            text=True, cwd=build.NSIS_SCRIPT.parent)
    assert result.returncode != 0
    assert "define VERSION, BUNDLE_DIR, OUTFILE and ICON" in result.stdout + result.stderr


@pytest.mark.slow
def test_script_compiles_around_the_frozen_bundle(frozen_bundle, tmp_path):
    setup = build.build_installer(frozen_bundle.folder, tmp_path / build.installer_name("0"), check_only=True)
    assert setup.read_bytes()[:2] == b"MZ"
    assert setup.stat().st_size > 0.9 * frozen_bundle.size_bytes   # the whole bundle is inside (stored)


# ---- what the script compiles to ------------------------------------------------------------------------
# No Windows here: the tests below read makensis's listing of every command as compiled (-V4, with the
# LogicLib and FileFunc macros' own commands shown), one block per function and section. They check what the
# script tells Windows to do, not what Windows then does (installer/wine_check.sh runs the installer).
def _compiled(tmp_path, amd64: bool = False) -> dict[str, str]:
    cmd = build.makensis_command(_payload(tmp_path), tmp_path / build.installer_name("1.2.3"), "1.2.3",
                                 check_only=True, amd64=amd64)
    cmd = [cmd[0], "-V4", "-DLOGICLIB_VERBOSITY=4", "-D_FILEFUNC_VERBOSE=4",
           *(c for c in cmd[1:] if not c.startswith("-V"))]
    listing = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=build.NSIS_SCRIPT.parent).stdout
    blocks = re.findall(r'^(?:Function|Section): "([^"]+)"[^\n]*\n(.*?)^(?:FunctionEnd|SectionEnd)', listing,
                        re.MULTILINE | re.DOTALL)
    return dict(blocks)


def test_the_running_app_is_asked_to_close_for_this_user_only(tmp_path):
    blocks = _compiled(tmp_path)
    for name in ("CloseRunningApp", "un.CloseRunningApp"):
        kills = re.findall(r"^Plugin command: Exec (taskkill.*)$", blocks[name], re.MULTILINE)
        assert kills == ['taskkill /FI "USERNAME eq $R8" /IM "HaloChat.exe"']     # no /F: the app saves first
        assert "ReadEnvStr: USERNAME->$R8" in blocks[name].split(kills[0])[0]  # read at run time, not at build


def test_an_upgrade_keeps_the_users_choice_of_desktop_shortcut(tmp_path):
    blocks = _compiled(tmp_path)
    assert 'Call "KeepDesktopChoice"' in blocks[".onInit"].split("ReadRegStr $InstalledVersion")[1]
    keep = blocks["KeepDesktopChoice"]
    assert 'StrCmp "$InstalledVersion" ""' in keep                  # an upgrade: a fresh install keeps the default
    assert 'IfFileExists: "$DESKTOP\\Halo Chat.lnk"' in keep
    assert "SectionSetFlags" in keep.split("IfFileExists")[1]       # ... unselects the desktop section


def test_the_estimated_size_counts_only_the_installed_files(tmp_path):
    app = _compiled(tmp_path)["!Halo Chat"]
    sizes = re.findall(r"^!insertmacro: GetSizeCall\nPush: (.*)\nPush: (.*)$", app, re.MULTILINE)
    assert sizes == [("$INSTDIR\\_internal", "/S=0K"), ("$INSTDIR", "/M=HaloChat.exe /S=0K /G=0"),
                     ("$INSTDIR", "/M=Uninstall Halo Chat.exe /S=0K /G=0")]


@pytest.mark.parametrize("amd64", [False, True])
def test_a_32_bit_windows_is_refused_before_anything_else(tmp_path, amd64):
    on_init = _compiled(tmp_path, amd64)[".onInit"]
    refusal = on_init.index('MessageBox: 16: "Halo Chat needs 64-bit Windows')
    assert refusal < on_init.index("Abort") < on_init.index("ReadRegStr")
    if not amd64:           # the 32-bit stub asks Windows; a 64-bit one cannot start on 32-bit Windows at all
        assert "IsWow64Process" in on_init[:refusal]


def test_a_purge_runs_the_app_to_forget_its_secrets_before_the_program_goes(tmp_path):
    from installer.entry import FORGET_SECRETS

    blocks = _compiled(tmp_path)
    uninstall = blocks["Uninstall"]
    order = [uninstall.index(s) for s in ('MessageBox: 292: "Also delete your conversations',
                                           'Call "un.ForgetSecrets"', 'Delete: "$INSTDIR\\HaloChat.exe"',
                                           'Call "un.RemoveUserData"')]
    assert order == sorted(order)
    assert (f'Plugin command: Exec /TIMEOUT=30000 "$INSTDIR\\HaloChat.exe" {FORGET_SECRETS}\n'
            in blocks["un.ForgetSecrets"])
