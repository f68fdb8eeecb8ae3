; What the installer lays down and registers. Included by halo-chat.nsi.

; Waits until the app in $INSTDIR is not running: a running exe cannot be opened for writing. Asks once,
; then closes it with taskkill (no /F: a normal close request, so the app saves like on a click on X),
; then waits up to 10 s and offers Retry. Silent mode closes it without asking; if it stays open, aborts.
; taskkill asks only this user's HaloChat.exe: by image name alone it reaches every session's copy it may
; (another user's on a shared PC, fast user switching). It cannot filter by image path, so this user's copy
; in another folder is asked too; a path test would need PowerShell (or wmic: being removed, terminates only).
; The user name is read at run time: $%USERNAME% would be the build machine's (makensis expands $%...%).
!macro DEFINE_CLOSE_RUNNING_APP prefix
Function ${prefix}CloseRunningApp
  StrCpy $R9 0
  check:
    IfFileExists "$INSTDIR\${APP_EXE}" 0 free
    ClearErrors
    FileOpen $R8 "$INSTDIR\${APP_EXE}" a
    IfErrors locked
    FileClose $R8
    Goto free
  locked:
    ${If} $R9 = 0
      MessageBox MB_OKCANCEL|MB_ICONINFORMATION "${APP_NAME} is running. Close it to continue?$\r$\n(Your conversations are saved as you chat.)" /SD IDOK IDOK close
      Abort "${APP_NAME} is still running."
      close:
      DetailPrint "Closing ${APP_NAME}..."
      ReadEnvStr $R8 USERNAME
      nsExec::Exec 'taskkill /FI "USERNAME eq $R8" /IM "${APP_EXE}"'
      Pop $R8
    ${EndIf}
    IntOp $R9 $R9 + 1
    ${If} $R9 > 20
      MessageBox MB_RETRYCANCEL|MB_ICONEXCLAMATION "${APP_NAME} is still running. Close it, then click Retry." /SD IDCANCEL IDRETRY retry
      Abort "${APP_NAME} is still running."
      retry:
      StrCpy $R9 1
    ${EndIf}
    Sleep 500
    Goto check
  free:
FunctionEnd
!macroend
!insertmacro DEFINE_CLOSE_RUNNING_APP ""

Function .onInit
  ; The app is 64-bit only, and the usual (32-bit) installer stub starts on 32-bit Windows too: refuse
  ; there before anything is laid down, instead of installing a program that cannot start.
  ${IfNot} ${RunningX64}
    MessageBox MB_ICONSTOP|MB_OK "${APP_NAME} needs 64-bit Windows, and this computer runs 32-bit Windows.$\r$\n$\r$\nInstall ${APP_NAME} on a computer that runs 64-bit Windows (Settings > System > About shows the System type)." /SD IDOK
    Abort
  ${EndIf}
  ReadRegStr $InstalledVersion HKCU "${UNINSTALL_KEY}" "DisplayVersion"
  Call KeepDesktopChoice
FunctionEnd

Function WelcomePre
  ${If} $InstalledVersion != ""
    StrCpy $UpgradeNote "${APP_NAME} $InstalledVersion is installed in $INSTDIR; it will be replaced by ${VERSION}. Your conversations, settings and models are kept."
  ${Else}
    StrCpy $UpgradeNote "Click Next to continue."
  ${EndIf}
FunctionEnd

; $INSTDIR already holds another program's "_internal" folder (every PyInstaller 6 app has one): installing there
; would delete it (an upgrade removes the old "_internal" first) or mix our files into it. Ours has our
; uninstaller beside it. The directory page asks for another folder; a silent install (/D=) stops.
!define FOREIGN_FOLDER_TEXT "$INSTDIR already holds another program's files (an _internal folder). Choose an empty folder, or a new one such as $INSTDIR\${APP_NAME}."
Function IsForeignFolder
  ${If} ${FileExists} "$INSTDIR\_internal\*.*"
  ${AndIfNot} ${FileExists} "$INSTDIR\${UNINSTALLER}"
    Push 1
  ${Else}
    Push 0
  ${EndIf}
FunctionEnd

Function RefuseForeignFolder
  Call IsForeignFolder
  Pop $R8
  ${If} $R8 = 1
    MessageBox MB_ICONEXCLAMATION|MB_OK "${FOREIGN_FOLDER_TEXT}"
    Abort    ; on a page's leave callback: stay on the page
  ${EndIf}
FunctionEnd

Function SkipWhenUpgrading
  ${If} $InstalledVersion != ""
    Abort    ; on a page's pre-callback: skip the page (the upgrade stays where the old version is)
  ${EndIf}
FunctionEnd

Section "!${APP_NAME}" SecApp
  SectionIn RO
  Call IsForeignFolder
  Pop $R8
  ${If} $R8 = 1
    MessageBox MB_ICONSTOP|MB_OK "${FOREIGN_FOLDER_TEXT}" /SD IDOK
    Abort "Not installed: ${FOREIGN_FOLDER_TEXT}"
  ${EndIf}
  SetOutPath "$INSTDIR"
  Call CloseRunningApp
  ${If} $InstalledVersion != ""
    DetailPrint "Upgrading ${APP_NAME} $InstalledVersion to ${VERSION}"
  ${EndIf}
  ; Upgrade in place: remove the old program files first so no stale module or DLL survives. Only the
  ; names the bundle owns are removed, never $INSTDIR itself (it could be a folder the user chose).
  RMDir /r "$INSTDIR\_internal"
  Delete "$INSTDIR\${APP_EXE}"
  File /r "${BUNDLE_DIR}\*"
  WriteUninstaller "$INSTDIR\${UNINSTALLER}"

  CreateShortcut "${START_MENU_LINK}" "$INSTDIR\${APP_EXE}" "" "$INSTDIR\${APP_EXE}" 0

  ; Add/Remove Programs (Settings > Apps), for this user only.
  WriteRegStr HKCU "${UNINSTALL_KEY}" "DisplayName" "${APP_NAME}"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "DisplayVersion" "${VERSION}"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "Publisher" "${PUBLISHER}"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "DisplayIcon" "$INSTDIR\${APP_EXE},0"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "InstallLocation" "$INSTDIR"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "UninstallString" '"$INSTDIR\${UNINSTALLER}"'
  WriteRegStr HKCU "${UNINSTALL_KEY}" "QuietUninstallString" '"$INSTDIR\${UNINSTALLER}" /S'
  WriteRegDWORD HKCU "${UNINSTALL_KEY}" "NoModify" 1
  WriteRegDWORD HKCU "${UNINSTALL_KEY}" "NoRepair" 1
  ; Only what this installer laid down: $INSTDIR may be a folder the user chose that holds other files, which
  ; a scan of the whole folder would count (and walk, however big).
  ${GetSize} "$INSTDIR\_internal" "/S=0K" $0 $1 $2
  ${GetSize} "$INSTDIR" "/M=${APP_EXE} /S=0K /G=0" $1 $2 $3
  IntOp $0 $0 + $1
  ${GetSize} "$INSTDIR" "/M=${UNINSTALLER} /S=0K /G=0" $1 $2 $3
  IntOp $0 $0 + $1
  IntFmt $0 "0x%08X" $0
  WriteRegDWORD HKCU "${UNINSTALL_KEY}" "EstimatedSize" "$0"     ; KiB
SectionEnd

Section "Desktop shortcut" SecDesktop
  CreateShortcut "${DESKTOP_LINK}" "$INSTDIR\${APP_EXE}" "" "$INSTDIR\${APP_EXE}" 0
SectionEnd

; Selected for a fresh install; an upgrade keeps the user's choice: selected only while the shortcut is on
; the desktop, so one the user deleted (or never had) does not come back. (After SecDesktop: it names it.)
Function KeepDesktopChoice
  ${If} $InstalledVersion != ""
  ${AndIfNot} ${FileExists} "${DESKTOP_LINK}"
    !insertmacro UnselectSection ${SecDesktop}
  ${EndIf}
FunctionEnd

!insertmacro MUI_FUNCTION_DESCRIPTION_BEGIN
  !insertmacro MUI_DESCRIPTION_TEXT ${SecApp} "The Halo Chat program (required)."
  !insertmacro MUI_DESCRIPTION_TEXT ${SecDesktop} "A shortcut to Halo Chat on your desktop."
!insertmacro MUI_FUNCTION_DESCRIPTION_END
