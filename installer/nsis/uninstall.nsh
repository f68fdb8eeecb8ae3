; What the uninstaller removes. Included by halo-chat.nsi.
; The program goes; the user's conversations, settings and models stay unless the user says yes to the
; question (default: No), or the uninstaller runs with /PURGE. Silent (/S) without /PURGE keeps them.
; A purge also removes the secrets the app saved in Windows Credential Manager (hub token, servers' keys).

!insertmacro DEFINE_CLOSE_RUNNING_APP "un."

Function un.onInit
  StrCpy $Purge "0"
  ${GetParameters} $R0
  ClearErrors
  ${GetOptions} $R0 "/PURGE" $R1
  ${IfNot} ${Errors}
    StrCpy $Purge "1"
  ${EndIf}
FunctionEnd

Section "Uninstall"
  Call un.CloseRunningApp
  ; Asked before anything is removed: forgetting the saved secrets needs the program.
  ${If} $Purge != "1"
  ${AndIf} ${FileExists} "${USER_DATA}\*.*"
    MessageBox MB_YESNO|MB_ICONQUESTION|MB_DEFBUTTON2 "Also delete your conversations, settings and downloaded models?$\r$\n$\r$\n${USER_DATA}$\r$\n$\r$\nChoose No to keep them: installing Halo Chat again finds them. Models you keep in other folders are never touched." /SD IDNO IDNO keep
    StrCpy $Purge "1"
    keep:
  ${EndIf}
  ${If} $Purge == "1"
    Call un.ForgetSecrets
  ${EndIf}

  Delete "$INSTDIR\${APP_EXE}"
  RMDir /r "$INSTDIR\_internal"
  Delete "$INSTDIR\${UNINSTALLER}"
  RMDir "$INSTDIR"                       ; only when empty: files the user put there stay
  Delete "${START_MENU_LINK}"
  Delete "${DESKTOP_LINK}"
  DeleteRegKey HKCU "${UNINSTALL_KEY}"

  ${If} $Purge == "1"
    Call un.RemoveUserData
  ${EndIf}
SectionEnd

; The program itself forgets them (installer/entry.py's FORGET_SECRETS), through the keyring package that
; saved them and knows their names in Credential Manager; it reads the servers from the settings, so this
; runs before those are deleted. Bounded: a program that does not answer must not hold the uninstall.
Function un.ForgetSecrets
  DetailPrint "Removing the hub token and server keys ${APP_NAME} saved in Windows Credential Manager"
  nsExec::Exec /TIMEOUT=30000 '"$INSTDIR\${APP_EXE}" ${FORGET_SECRETS_FLAG}'
  Pop $R0
  ${If} $R0 != 0
    DetailPrint "Could not remove them ($R0): Credential Manager > Windows Credentials lists them"
  ${EndIf}
FunctionEnd

Function un.RemoveUserData
  DetailPrint "Removing your conversations, settings and models"
  RMDir /r "${USER_DATA}"
  RMDir /r "${USER_SETTINGS}"
FunctionEnd
