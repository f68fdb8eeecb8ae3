"""The Diagnostics view's tree: a DiagnosticsReport rendered as grouped rows (item | badge | value or reason).

Badges are painted by BadgeDelegate from a kind stored on the item (ok/bad/warn/off/info), so they look the
same in light and dark themes. Full texts are also tooltips, because reasons can be long.
The tree only renders records from engine.diagnostics_report; it never touches a backend.
"""
from __future__ import annotations

from PySide6.QtCore import QModelIndex, QRect, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFont, QPainter
from PySide6.QtWidgets import QStyle, QStyledItemDelegate, QStyleOptionViewItem, QTreeWidget, QTreeWidgetItem

from engine.diagnostics_report import (
    ATTRIBUTE_ROWS,
    CAPABILITY_ROWS,
    HOST_READ_ROWS,
    DiagnosticsReport,
    SelfTestRun,
    device_kind,
    fmt_bytes,
    fmt_flag,
    host_addressable_headline,
    logits_line,
    self_test_line,
    system_rows,
)

BADGE_ROLE = Qt.ItemDataRole.UserRole + 1
# kind -> (fill, text colour): green for good, red for a failure or absence, amber for "off by choice".
BADGE_COLORS = {"ok": ("#2b8a3e", "#ffffff"), "bad": ("#c92a2a", "#ffffff"), "warn": ("#e67700", "#ffffff"),
                "off": ("#868e96", "#ffffff"), "info": ("#1c7ed6", "#ffffff")}
COL_ITEM, COL_BADGE, COL_VALUE = 0, 1, 2


class BadgeDelegate(QStyledItemDelegate):
    """Paints the badge column as a rounded pill; other columns as usual."""

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex) -> None:
        kind = index.data(BADGE_ROLE)
        text = index.data(Qt.ItemDataRole.DisplayRole)
        if index.column() != COL_BADGE or not kind or not text:
            super().paint(painter, option, index)
            return
        if option.state & QStyle.StateFlag.State_Selected:
            painter.fillRect(option.rect, option.palette.highlight())
        fill, fg = BADGE_COLORS.get(kind, BADGE_COLORS["info"])
        font = QFont(option.font)
        font.setBold(True)
        font.setPointSizeF(max(font.pointSizeF() - 1, 7))
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setFont(font)
        width = painter.fontMetrics().horizontalAdvance(text) + 16
        height = min(option.rect.height() - 4, painter.fontMetrics().height() + 4)
        rect = QRectF(option.rect.x() + 4, option.rect.center().y() - height / 2 + 1, width, height)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(QColor(fill))
        painter.drawRoundedRect(rect, height / 2, height / 2)
        painter.setPen(QColor(fg))
        painter.drawText(rect, Qt.AlignmentFlag.AlignCenter, text)
        painter.restore()

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex) -> QSize:
        hint = super().sizeHint(option, index)
        view = self.parent()
        text = index.data(Qt.ItemDataRole.DisplayRole)
        if index.column() == COL_VALUE and text and isinstance(view, QTreeWidget):
            # Reasons wrap within the column instead of being cut off: height for the column's width.
            width = max(view.columnWidth(COL_VALUE) - 12, 120)
            box = option.fontMetrics.boundingRect(QRect(0, 0, width, 100_000), Qt.TextFlag.TextWordWrap, text)
            return QSize(hint.width(), max(box.height() + 8, 24))
        return QSize(hint.width() + 20, max(hint.height(), 24))


def make_tree() -> QTreeWidget:
    tree = QTreeWidget()
    tree.setObjectName("DiagnosticsTree")
    tree.setColumnCount(3)
    tree.setHeaderLabels(["Item", "Status", "Value / reason"])
    tree.setItemDelegate(BadgeDelegate(tree))
    tree.setAlternatingRowColors(True)
    tree.setUniformRowHeights(False)
    tree.setWordWrap(True)
    tree.setColumnWidth(COL_ITEM, 350)
    tree.setColumnWidth(COL_BADGE, 140)
    tree.setTextElideMode(Qt.TextElideMode.ElideNone)
    tree.header().setStretchLastSection(True)
    # Row heights depend on the value column's width: lay the rows out again when it changes.
    tree.header().sectionResized.connect(lambda col, _old, _new: col == COL_VALUE and tree.doItemsLayout())
    return tree


def row(parent, item: str, value: str = "", badge: str = "", kind: str = "") -> QTreeWidgetItem:
    it = QTreeWidgetItem(parent, [item, badge, value])
    it.setToolTip(COL_VALUE, value)
    it.setToolTip(COL_ITEM, item)
    if badge:
        it.setData(COL_BADGE, BADGE_ROLE, kind or "info")
        it.setToolTip(COL_BADGE, badge)
    return it


def group(parent, title: str, badge: str = "", kind: str = "", value: str = "") -> QTreeWidgetItem:
    it = row(parent, title, value, badge, kind)
    font = it.font(COL_ITEM)
    font.setBold(True)
    it.setFont(COL_ITEM, font)
    return it


def yes_no(value: bool) -> tuple[str, str]:
    return ("YES", "ok") if value else ("NO", "bad")


def fill_tree(tree: QTreeWidget, report: DiagnosticsReport) -> None:
    tree.clear()
    _system(tree, report)
    _in_use(tree, report)
    if report.self_test is not None:
        add_self_test(tree, report.self_test)
    backends = group(tree, "Backends", f"{sum(p.available for p in report.probes)} of {len(report.probes)}",
                     "info", "every backend the app knows, in the order 'auto' tries them")
    for p in report.probes:
        _backend(backends, p, report.descriptions.get(p.backend, ""), p.backend == report.selected_backend)
    tree.expandToDepth(1)
    for i in range(tree.topLevelItemCount()):     # the library list is long and rarely the point
        system = tree.topLevelItem(i)
        for j in range(system.childCount()):
            if system.child(j).text(COL_ITEM) == "Libraries":
                tree.collapseItem(system.child(j))
    for i in range(backends.childCount()):     # the backend in use is open down to its facts
        child = backends.child(i)
        if not report.probes[i].available:
            tree.collapseItem(child)
        if child.data(COL_ITEM, Qt.ItemDataRole.UserRole) == report.selected_backend:
            tree.expandItem(child)
            for j in range(child.childCount()):
                tree.expandItem(child.child(j))


def _system(tree: QTreeWidget, r: DiagnosticsReport) -> None:
    s = r.system
    g = group(tree, "System", value=f"{s.os}, {s.cpu}")
    for label, value in system_rows(s):
        row(g, label, value)
    libs = row(g, "Libraries", ", ".join(f"{k} {v}" for k, v in s.libraries.items() if v != "not installed"))
    for name, version in s.libraries.items():
        installed = version != "not installed"
        row(libs, name, version, "" if installed else "ABSENT", "off")
    row(g, "Report created", r.created)


def _in_use(tree: QTreeWidget, r: DiagnosticsReport) -> None:
    g = group(tree, "In use", r.selected_backend or "NONE", "ok" if r.selected_backend else "bad",
              f"backend setting '{r.backend_setting}'")
    row(g, "Backend", r.selected_reason, r.selected_backend or "NONE", "ok" if r.selected_backend else "bad")
    row(g, "Readback path", r.readback_reason, r.readback_path.upper() if r.readback_path == "none"
        else r.readback_path, "bad" if r.readback_path == "none" else "ok")
    if r.async_scheduling:
        badge, kind = "ON", "ok"
    else:   # off by the user's choice is amber; off because the backend cannot do it safely is red
        badge, kind = "OFF", "warn" if ("Settings" in r.async_reason or "HALO_" in r.async_reason) else "bad"
    row(g, "Async scheduling", r.async_reason, badge, kind)
    selected = r.probe_for(r.selected_backend) if r.selected_backend else None
    if selected is not None and selected.available:
        addressable = selected.capabilities.device_memory_host_addressable.value
        row(g, "Device memory", host_addressable_headline(selected), *yes_no(addressable))


def add_self_test(tree: QTreeWidget, run: SelfTestRun) -> QTreeWidgetItem:
    g = group(tree, f"Self-test ({run.backend})", "PASSED" if run.passed else "FAILED",
              "ok" if run.passed else "bad", f"{run.seconds:.3f} s")
    st = run.readback
    row(g, "Readback", self_test_line(st), *(("PASSED", "ok") if st.passed else ("FAILED", "bad")))
    if st.step_us_median is not None:
        row(g, "Step time (median / p90)", f"{st.step_us_median:.2f} us / {st.step_us_p90:.2f} us")
    if st.error:
        err = row(g, "Error", st.error, "ERROR", "bad")
        err.setForeground(COL_VALUE, QColor(BADGE_COLORS["bad"][0]))
    if run.logits is not None:
        kind = {True: ("PASSED", "ok"), False: ("FAILED", "bad"), None: ("NOT RUN", "off")}[run.logits.passed]
        row(g, "GPU vs CPU logits", logits_line(run.logits), *kind)
    tree.expandItem(g)
    return g


def _backend(parent, p, description: str, selected: bool) -> None:
    badge, kind = ("AVAILABLE", "ok") if p.available else ("NOT FOUND", "bad")
    title = p.backend + ("  (in use)" if selected else "")
    b = group(parent, title, badge, kind, p.reason)
    b.setData(COL_ITEM, Qt.ItemDataRole.UserRole, p.backend)
    if p.advice:
        row(b, "What to do", p.advice)
    if description:
        row(b, "What it is", description)
    if p.kernels:
        row(b, "Kernels", p.kernels.removeprefix("kernels: "))
    f = p.facts
    if f is not None:
        dev = group(b, "Device", value=f"{f.name} ({f.arch})")
        row(dev, "Name", f.name or "?")
        row(dev, "Arch", f.arch or "?")
        row(dev, "Kind", device_kind(f.integrated, f.api))
        row(dev, "Total memory", fmt_bytes(f.total_memory))
        row(dev, "Free memory", fmt_bytes(f.free_memory))
        row(dev, "Runtime", f"{f.api} {f.runtime_version}" + (f", driver {f.driver_version}" if f.driver_version else ""))
        row(dev, "Runtime library", f.library_path or "-")
        row(dev, "Kernel compiler", f.rtc_library_path or "-")
        if f.api != "cpu":
            attrs = group(b, "Probed attributes", value="raw values as the runtime reported them (1, 0, unknown)")
            for attr, runtime_name in ATTRIBUTE_ROWS:
                value = getattr(f, attr)
                row(attrs, attr, f"{fmt_flag(value)}  (DeviceAttribute{runtime_name})", fmt_flag(value),
                    {True: "ok", False: "off", None: "warn"}[value])
            for field, label in HOST_READ_ROWS:
                outcome = getattr(f, field)
                passed, not_run = outcome == "passed", outcome.startswith("not run")
                row(attrs, label, outcome, "PASSED" if passed else ("NOT RUN" if not_run else "FAILED"),
                    "ok" if passed else ("off" if not_run else "bad"))
        code = group(b, "Implemented here")
        row(code, "pinned-staging readback", "", *yes_no(f.implements_pinned_staging))
        row(code, "zero-copy view", "", *yes_no(f.implements_zero_copy))
        for e in f.errors:
            row(b, "Query error", e, "ERROR", "bad")
    c = p.capabilities
    if c is not None:
        caps = group(b, "Derived capabilities", value=host_addressable_headline(p))
        for key, label in CAPABILITY_ROWS:
            cap = getattr(c, key)
            row(caps, label, cap.reason, *yes_no(cap.value))
        row(caps, "readback path", c.readback_reason, c.readback_path, "bad" if c.readback_path == "none" else "ok")
    if p.self_test is not None:
        st = p.self_test
        row(b, "Self-test", self_test_line(st), *(("PASSED", "ok") if st.passed else ("FAILED", "bad")))
