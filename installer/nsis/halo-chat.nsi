; Halo Chat installer: per-user (no admin rights), into %LOCALAPPDATA%\Programs\Halo Chat.
; Build it with `python installer/build.py`, which passes the defines below:
;   makensis -DVERSION=0.1.0 -DVERSION_QUAD=0.1.0.0 -DBUNDLE_DIR=<PyInstaller folder>
;            -DOUTFILE=<setup.exe> -DICON=<halo.ico> -DFORGET_SECRETS_FLAG=<entry.py's FORGET_SECRETS>
;            [-DEXE_NAME=HaloChat] [-DCHECK_ONLY] [-DTARGET_AMD64] halo-chat.nsi
; Pieces: this file (settings and pages), install.nsh (what is laid down and registered),
; uninstall.nsh (what is removed, and the question about the user's data).
; Command line: setup.exe /S (silent, keeps defaults); uninstaller /S keeps user data unless /PURGE.

!ifdef TARGET_AMD64
  Target amd64-unicode   ; a 64-bit installer stub (Debian's wine64 alone cannot run the 32-bit one)
!else
  Unicode true           ; the usual 32-bit stub: runs everywhere, installs the 64-bit app just the same
!endif
!include "MUI2.nsh"
!include "FileFunc.nsh"
!include "LogicLib.nsh"
!include "Sections.nsh"
!include "x64.nsh"

!ifndef VERSION | BUNDLE_DIR | OUTFILE | ICON
  !error "define VERSION, BUNDLE_DIR, OUTFILE and ICON (installer/build.py does)"
!endif
!ifndef FORGET_SECRETS_FLAG
  !error "define FORGET_SECRETS_FLAG, the app's option that forgets its secrets (installer/build.py does)"
!endif
!ifndef VERSION_QUAD
  !define VERSION_QUAD "${VERSION}.0"
!endif
!ifndef EXE_NAME
  !define EXE_NAME "HaloChat"
!endif

!define APP_NAME "Halo Chat"
!define PUBLISHER "Halo Chat contributors"
!define APP_EXE "${EXE_NAME}.exe"
!define UNINSTALLER "Uninstall Halo Chat.exe"
!define UNINSTALL_KEY "Software\Microsoft\Windows\CurrentVersion\Uninstall\HaloChat"
!define USER_DATA "$LOCALAPPDATA\Halo Chat"      ; conversations, models, logs, caches (engine/paths.py)
!define USER_SETTINGS "$APPDATA\Halo Chat"       ; QSettings' INI file (app/settings.py)
!define START_MENU_LINK "$SMPROGRAMS\${APP_NAME}.lnk"
!define DESKTOP_LINK "$DESKTOP\${APP_NAME}.lnk"

Name "${APP_NAME}"
Caption "${APP_NAME} ${VERSION} Setup"
OutFile "${OUTFILE}"
RequestExecutionLevel user                      ; per-user install: never asks for admin rights
InstallDir "$LOCALAPPDATA\Programs\${APP_NAME}"
InstallDirRegKey HKCU "${UNINSTALL_KEY}" "InstallLocation"   ; an upgrade goes where the old one is
!ifdef CHECK_ONLY
  SetCompress off        ; a script check on Linux: the payload is not shippable, skip minutes of LZMA
!else
  SetCompressor /SOLID lzma
!endif
ManifestDPIAware true
ShowInstDetails show
ShowUninstDetails show
BrandingText "${APP_NAME} ${VERSION}"

VIProductVersion "${VERSION_QUAD}"
VIAddVersionKey "ProductName" "${APP_NAME}"
VIAddVersionKey "CompanyName" "${PUBLISHER}"
VIAddVersionKey "FileDescription" "${APP_NAME} Setup"
VIAddVersionKey "FileVersion" "${VERSION}"
VIAddVersionKey "ProductVersion" "${VERSION}"
VIAddVersionKey "LegalCopyright" "MIT License"

Var InstalledVersion    ; DisplayVersion of the install being upgraded ("" for a fresh install)
Var UpgradeNote     ; the welcome page's last paragraph (fresh install or upgrade)
Var Purge               ; "1" when the uninstaller got /PURGE: remove user data without asking

; ---- pages ------------------------------------------------------------------------------------------
!define MUI_ICON "${ICON}"
!define MUI_UNICON "${ICON}"
!define MUI_ABORTWARNING
!define MUI_WELCOMEPAGE_TITLE "Welcome to ${APP_NAME} ${VERSION}"
!define MUI_WELCOMEPAGE_TEXT "Halo Chat lets you chat with language models that run on your own computer.$\r$\n$\r$\nIt installs for you only, with no administrator rights.$\r$\n$\r$\n$UpgradeNote"
!define MUI_PAGE_CUSTOMFUNCTION_PRE WelcomePre
!insertmacro MUI_PAGE_WELCOME
!define MUI_PAGE_CUSTOMFUNCTION_PRE SkipWhenUpgrading
!define MUI_PAGE_CUSTOMFUNCTION_LEAVE RefuseForeignFolder
!insertmacro MUI_PAGE_DIRECTORY
!insertmacro MUI_PAGE_COMPONENTS
!insertmacro MUI_PAGE_INSTFILES
!define MUI_FINISHPAGE_RUN "$INSTDIR\${APP_EXE}"
!define MUI_FINISHPAGE_RUN_TEXT "Start ${APP_NAME}"
!insertmacro MUI_PAGE_FINISH

!insertmacro MUI_UNPAGE_CONFIRM
!insertmacro MUI_UNPAGE_INSTFILES

!insertmacro MUI_LANGUAGE "English"

!include "install.nsh"
!include "uninstall.nsh"
