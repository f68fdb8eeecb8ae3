; What the uninstaller removes. Included by halo-chat.nsi.
; The program goes; the user's conversations, settings and models stay unless the user says yes to the
; question (default: No), or the uninstaller runs with /PURGE. Silent (/S) without /PURGE keeps them.

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
  Delete "$INSTDIR\${APP_EXE}"
  RMDir /r "$INSTDIR\_internal"
  Delete "$INSTDIR\${UNINSTALLER}"
  RMDir "$INSTDIR"                       ; only when empty: files the user put there stay
  Delete "${START_MENU_LINK}"
  Delete "${DESKTOP_LINK}"
  DeleteRegKey HKCU "${UNINSTALL_KEY}"

  ${If} $Purge == "1"
    Call un.RemoveUserData
  ${ElseIf} ${FileExists} "${USER_DATA}\*.*"
    MessageBox MB_YESNO|MB_ICONQUESTION|MB_DEFBUTTON2 "Also delete your conversations, settings and downloaded models?$\r$\n$\r$\n${USER_DATA}$\r$\n$\r$\nChoose No to keep them: installing Halo Chat again finds them. Models you keep in other folders are never touched." /SD IDNO IDNO keep
    Call un.RemoveUserData
    keep:
  ${EndIf}
SectionEnd

Function un.RemoveUserData
  DetailPrint "Removing your conversations, settings and models"
  RMDir /r "${USER_DATA}"
  RMDir /r "${USER_SETTINGS}"
FunctionEnd
