"""`python -m app [--starter | --model PATH]`: start Halo Chat."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QMessageBox

from app.settings import APPLICATION, ORGANIZATION, AppSettings, use_settings_dir
from app.store import HistoryError, Store, default_db_path, set_aside
from app.theme import app_icon, apply_theme


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="halo-chat", description="Halo Chat: chat with local models")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--starter", action="store_true", help="fetch the starter model if missing, and load it")
    g.add_argument("--model", help="a GGUF file to load at start")
    p.add_argument("--settings-dir", help="keep settings in this folder (portable use, tests)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.settings_dir:
        use_settings_dir(args.settings_dir)
    from app.platform_hint import build_application

    app = QApplication.instance() or build_application(lambda: QApplication(sys.argv[:1]))
    app.setOrganizationName(ORGANIZATION)
    app.setApplicationName(APPLICATION)
    app.setWindowIcon(app_icon())
    from app.single_instance import SingleInstance, bring_to_front
    from engine.paths import data_dir

    instance = SingleInstance(data_dir(), app)
    if not instance.acquire():                # another Halo Chat owns this data folder: show it instead
        instance.notify_owner()
        return 0
    settings = AppSettings()
    apply_theme(app, settings.theme)

    from app.main_window import MainWindow  # after the QApplication exists

    store = open_history(default_db_path())
    if store is None:
        return 1
    window = MainWindow(store, settings)
    instance.activated.connect(lambda: bring_to_front(window))
    window.show()
    start_model(window, args)
    return app.exec()


def open_history(path: Path) -> Store | None:
    """The chat history at `path`. Where it can't be opened the user is told why (a windowed app has no
    console: an exception would just end it); a damaged file may be set aside, renamed and never deleted, for
    an empty history to start beside it. None: the user chose to quit."""
    try:
        return Store(path)
    except HistoryError as e:
        error = e
    box = QMessageBox(QMessageBox.Icon.Warning, "Chat history can't be opened", str(error))
    box.setTextFormat(Qt.TextFormat.PlainText)           # a path is no markup
    start = None
    if error.damaged:
        box.setInformativeText("Start with an empty history? The file is kept under a new name beside it, "
                               "nothing is deleted.")
        start = box.addButton("Start an empty history", QMessageBox.ButtonRole.AcceptRole)
    box.setDefaultButton(box.addButton("Quit", QMessageBox.ButtonRole.RejectRole))
    box.exec()
    if start is None or box.clickedButton() is not start:
        return None
    try:
        set_aside(path)
        return Store(path)
    except (HistoryError, OSError) as e:
        QMessageBox.critical(None, "Chat history can't be opened", str(e))
        return None


def start_model(window, args) -> None:
    """What to load at start. The library's scan runs off the GUI thread (reading the headers of a folder of big
    models takes seconds), so the window is up and answers meanwhile; the choices that need its list (the model
    used last time, the first-run offer) are made when it arrives."""
    from engine import model_store

    window.library.scanned.connect(lambda entries: _after_first_scan(window, entries),
                                   Qt.ConnectionType.SingleShotConnection)
    window.library.scan(window.settings.model_folders)
    if args.model:
        window.models.load_path_now(args.model)
    elif args.starter:
        path = model_store.find_local(model_store.STARTER)
        if path:
            window.models.load_path_now(str(path))
        else:
            window.models.fetch_starter()


def _after_first_scan(window, entries) -> None:
    """Loads the model used last time, says why it can't, or offers the starter model to a first run; nothing
    where a model was asked for meanwhile (--model, --starter, or the user opening one before the scan ended)."""
    if window.models.model_chosen():
        return
    if last := window.settings.last_model:
        entry = next((e for e in entries if str(e.path) == last), None)
        if entry is not None and entry.ok:
            window.models.load(entry)
        else:
            window.models.explain_missing_last_model(last, entry)
    elif not entries:
        window.models.offer_starter()


if __name__ == "__main__":
    sys.exit(main())
