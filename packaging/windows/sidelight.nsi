; Sidelight's Windows installer (NSIS 3, Modern UI 2).
;
;   makensis -DVERSION=0.1.0 -DPAYLOAD=dist\sidelight -DICON=build\windows\sidelight.ico
;            -DOUTFILE=dist\sidelight-0.1.0-setup.exe packaging\windows\sidelight.nsi
;
; Per-user install without administrator rights into %LOCALAPPDATA%\Programs\Sidelight, a
; Start-menu shortcut, an optional desktop shortcut, optional start at login (the same
; HKCU Run value the app's Settings switch writes), and an uninstaller that asks whether to
; keep the downloaded models (%LOCALAPPDATA%\Sidelight\models) and the cache
; (%LOCALAPPDATA%\Sidelight\Cache). PAYLOAD is the one-folder
; PyInstaller bundle (sidelight.exe, sidelight-cli.exe, _internal\); packaging/nsis.py
; compiles this script against a placeholder payload on Linux to check it.

Unicode true
SetCompressor /SOLID lzma
RequestExecutionLevel user
ManifestDPIAware true

!ifndef VERSION
  !error "pass -DVERSION=x.y.z"
!endif
!ifndef PAYLOAD
  !error "pass -DPAYLOAD=<the dist\sidelight folder>"
!endif
!ifndef OUTFILE
  !define OUTFILE "sidelight-${VERSION}-setup.exe"
!endif

!define APP "Sidelight"
!define EXE "sidelight.exe"
!define UNINSTALL_KEY "Software\Microsoft\Windows\CurrentVersion\Uninstall\${APP}"
!define RUN_KEY "Software\Microsoft\Windows\CurrentVersion\Run"
!define SETTINGS_KEY "Software\${APP}"

Name "${APP}"
OutFile "${OUTFILE}"
InstallDir "$LOCALAPPDATA\Programs\${APP}"
InstallDirRegKey HKCU "${SETTINGS_KEY}" "InstallDir"
BrandingText "${APP} ${VERSION}"
VIProductVersion "${VERSION}.0"
VIAddVersionKey "ProductName" "${APP}"
VIAddVersionKey "FileDescription" "${APP} installer"
VIAddVersionKey "ProductVersion" "${VERSION}"
VIAddVersionKey "FileVersion" "${VERSION}"
VIAddVersionKey "LegalCopyright" "Sidelight developers, Apache-2.0"

!include "MUI2.nsh"
!include "LogicLib.nsh"

!ifdef ICON
  !define MUI_ICON "${ICON}"
  !define MUI_UNICON "${ICON}"
!endif
!define MUI_ABORTWARNING
!define MUI_COMPONENTSPAGE_NODESC
!define MUI_FINISHPAGE_RUN "$INSTDIR\${EXE}"
!define MUI_FINISHPAGE_RUN_TEXT "Start ${APP} now (it lives in the notification area)"

!insertmacro MUI_PAGE_WELCOME
!insertmacro MUI_PAGE_DIRECTORY
!insertmacro MUI_PAGE_COMPONENTS
!insertmacro MUI_PAGE_INSTFILES
!insertmacro MUI_PAGE_FINISH
!insertmacro MUI_UNPAGE_CONFIRM
!insertmacro MUI_UNPAGE_INSTFILES
!insertmacro MUI_LANGUAGE "English"

; A running Sidelight (or its engine process) holds its files open.
!macro CloseSidelight
  nsExec::Exec 'taskkill /T /IM "${EXE}"'
  Pop $0
  nsExec::Exec 'taskkill /T /IM "sidelight-cli.exe"'
  Pop $0
  Sleep 1500
!macroend

Section "${APP}" SecApp
  SectionIn RO
  SetShellVarContext current
  !insertmacro CloseSidelight
  ; An upgrade replaces the whole bundle: stale libraries from an older version must not stay.
  RMDir /r "$INSTDIR\_internal"
  SetOutPath "$INSTDIR"
  File /r "${PAYLOAD}\*"
  WriteUninstaller "$INSTDIR\uninstall.exe"
  CreateShortcut "$SMPROGRAMS\${APP}.lnk" "$INSTDIR\${EXE}" "" "$INSTDIR\${EXE}" 0
  WriteRegStr HKCU "${SETTINGS_KEY}" "InstallDir" "$INSTDIR"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "DisplayName" "${APP}"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "DisplayVersion" "${VERSION}"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "Publisher" "Sidelight developers"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "DisplayIcon" "$INSTDIR\${EXE}"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "InstallLocation" "$INSTDIR"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "UninstallString" '"$INSTDIR\uninstall.exe"'
  WriteRegStr HKCU "${UNINSTALL_KEY}" "QuietUninstallString" '"$INSTDIR\uninstall.exe" /S'
  WriteRegDWORD HKCU "${UNINSTALL_KEY}" "NoModify" 1
  WriteRegDWORD HKCU "${UNINSTALL_KEY}" "NoRepair" 1
SectionEnd

Section /o "Desktop shortcut" SecDesktop
  SetShellVarContext current
  CreateShortcut "$DESKTOP\${APP}.lnk" "$INSTDIR\${EXE}" "" "$INSTDIR\${EXE}" 0
SectionEnd

Section /o "Start ${APP} when I log in" SecLogin
  ; The value the app's own "Start at login" setting reads and writes.
  WriteRegStr HKCU "${RUN_KEY}" "${APP}" '"$INSTDIR\${EXE}"'
SectionEnd

Section "-size"
  ; The installed size, in KB, for Settings > Apps.
  SectionGetSize ${SecApp} $0
  WriteRegDWORD HKCU "${UNINSTALL_KEY}" "EstimatedSize" $0
SectionEnd

Function .onInit
  ; Installing for every user needs administrator rights; this installer never asks.
  SetShellVarContext current
FunctionEnd

Section "Uninstall"
  SetShellVarContext current
  !insertmacro CloseSidelight
  Delete "$SMPROGRAMS\${APP}.lnk"
  Delete "$DESKTOP\${APP}.lnk"
  DeleteRegValue HKCU "${RUN_KEY}" "${APP}"
  DeleteRegKey HKCU "${UNINSTALL_KEY}"
  DeleteRegKey HKCU "${SETTINGS_KEY}"
  RMDir /r "$INSTDIR\_internal"
  Delete "$INSTDIR\${EXE}"
  Delete "$INSTDIR\sidelight-cli.exe"
  Delete "$INSTDIR\uninstall.exe"
  RMDir "$INSTDIR"
  ; Downloaded models can be many gigabytes and slow to fetch again: the person decides.
  ; A silent uninstall (/S) keeps them.
  ${If} ${FileExists} "$LOCALAPPDATA\${APP}\models\*.*"
  ${OrIf} ${FileExists} "$LOCALAPPDATA\${APP}\Cache\*.*"
    MessageBox MB_YESNO|MB_ICONQUESTION|MB_DEFBUTTON2 \
      "Also delete the downloaded models and the model cache?$\r$\n$\r$\n$LOCALAPPDATA\${APP}\models$\r$\n$LOCALAPPDATA\${APP}\Cache$\r$\n$\r$\nChoose No to keep them for a later install." \
      /SD IDNO IDNO keep_cache
    RMDir /r "$LOCALAPPDATA\${APP}\models"
    RMDir /r "$LOCALAPPDATA\${APP}\Cache"
    keep_cache:
  ${EndIf}
SectionEnd
