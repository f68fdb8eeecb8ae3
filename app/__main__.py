"""`python -m app [--starter | --model PATH]`: start Halo Chat."""
from __future__ import annotations

import argparse
import sys

from PySide6.QtWidgets import QApplication

from app.settings import APPLICATION, ORGANIZATION, AppSettings, use_settings_dir
from app.store import Store
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

    window = MainWindow(Store(), settings)
    instance.activated.connect(lambda: bring_to_front(window))
    window.show()
    start_model(window, args)
    return app.exec()


def start_model(window, args) -> None:
    from engine import model_store

    entries = window.library.scan_now(window.settings.model_folders)
    if args.model:
        window.models.load_path_now(args.model)
    elif args.starter:
        path = model_store.find_local(model_store.STARTER)
        if path:
            window.models.load_path_now(str(path))
        else:
            window.models.fetch_starter()
    elif last := window.settings.last_model:
        entry = next((e for e in entries if str(e.path) == last), None)
        if entry is not None and entry.ok:
            window.models.load_path_now(last)
        else:
            window.models.explain_missing_last_model(last, entry)
    elif not entries:
        window.models.offer_starter()


if __name__ == "__main__":
    sys.exit(main())
