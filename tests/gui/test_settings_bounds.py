"""The Settings dialog's sampling fields at their bounds: every value the form lets the user pick must be one the
engine accepts, so that it is saved, read back after a restart and sent with a request as it was picked."""
from __future__ import annotations

import pytest

from app.settings import AppSettings
from app.widgets.sampling_form import SamplingForm
from app.widgets.settings_dialog import SettingsDialog

pytestmark = [pytest.mark.gui, pytest.mark.qt_log_ignore("This plugin does not support")]

BOXES = ("temperature", "top_p", "top_k", "max_tokens", "context_length", "seed")


@pytest.mark.parametrize("end", ["minimum", "maximum"])
def test_every_sampling_value_the_form_offers_survives_ok_and_a_restart(qtbot, end):
    dlg = SettingsDialog(AppSettings())
    qtbot.addWidget(dlg)
    form = dlg.sampling
    for name in BOXES:
        box = getattr(form, name)
        box.setValue(getattr(box, end)())
    picked = form.value()
    picked.to_params().validate()              # the engine takes what the form offers...
    dlg.apply()
    assert AppSettings().sampling == picked    # ...so it is stored and read back, not silently replaced
    reopened = SamplingForm(AppSettings().sampling)
    qtbot.addWidget(reopened)
    assert reopened.value() == picked


def test_a_hand_edited_file_shows_the_values_in_effect(qtbot, isolated_user_dirs):
    """Values the engine would take but the form cannot show (written by hand, or by a version with wider
    fields) must not be in effect while the dialog shows others: OK would then change them unasked."""
    ini = isolated_user_dirs / "settings" / "Halo Chat" / "Halo Chat.ini"
    ini.parent.mkdir(parents=True, exist_ok=True)
    ini.write_text("[engine]\nbackend=vulkan\nkv_cache_type=q3_k\n[ui]\ntheme=solarized\n"
                   "[sampling]\ntemperature=5\ntop_k=100000\nmax_tokens=1000000\ncontext_length=999999999\n"
                   "seed=99999999999\ncontext_overflow=compress\n", encoding="utf-8")
    settings = AppSettings()
    assert (settings.backend, settings.theme) == ("auto", "system")
    dlg = SettingsDialog(settings)
    qtbot.addWidget(dlg)
    assert dlg.sampling.value() == settings.sampling       # what the dialog shows is what requests use
