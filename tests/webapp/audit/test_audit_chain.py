"""The chain: appends from several threads and processes make one gapless order, and any edit,
deletion or re-chaining without the key makes audit_verify fail naming the entry."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from django.db import close_old_connections, connection

from webapp.audit import chain
from webapp.audit.chain import entry_hash, entry_hmac
from webapp.audit.checks import check_audit_key
from webapp.audit.models import AuditEntry, AuditHead
from webapp.audit.services import audit_append
from webapp.audit.verify import audit_verify

REPO = Path(__file__).resolve().parents[3]
KEY = "test-ledger-key-kept-outside-the-database"


@pytest.fixture(autouse=True)
def _ledger_key(settings) -> None:
    settings.UNDOABLE_AUDIT_KEY = KEY


def ledger(count: int) -> list[AuditEntry]:
    for n in range(count):
        audit_append(
            event="run",
            kind="python",
            target=f"run {n}",
            forward_code=f"print({n})",
            hosts=["api.example.com"],
            intent=f"step {n}",
            outcome="queued",
            digests={"code": str(n)},
        )
    return list(AuditEntry.objects.order_by("seq"))


def test_appends_from_several_threads_make_one_gapless_valid_chain(transactional_db):
    def append_some() -> None:
        try:
            for _ in range(10):
                audit_append(event="run", outcome="queued")
        finally:
            close_old_connections()

    threads = [threading.Thread(target=append_some) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert list(AuditEntry.objects.order_by("seq").values_list("seq", flat=True)) == list(
        range(1, 41)
    )
    assert audit_verify() == (40, None)


APPENDER = """
import django, sys
django.setup()
from webapp.audit.services import audit_append
for _ in range(int(sys.argv[1])):
    audit_append(event="run", outcome="queued from another process")
"""


def test_appends_from_several_processes_make_one_gapless_valid_chain(transactional_db):
    database = settings.DATABASES["default"]
    if database["ENGINE"] != "django.db.backends.sqlite3":
        pytest.skip("the processes reach the test database as a SQLite file")
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "webapp.settings",
        "DATABASE_URL": f"sqlite:///{database['NAME']}",
        "UNDOABLE_AUDIT_KEY": KEY,
        "PYTHONPATH": str(REPO),
    }
    audit_append(event="run", outcome="queued here first")
    processes = [
        subprocess.Popen([sys.executable, "-c", APPENDER, "15"], env=env, cwd=REPO)
        for _ in range(3)
    ]
    assert [process.wait(timeout=60) for process in processes] == [0, 0, 0]
    seqs = list(AuditEntry.objects.order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, 47))
    assert audit_verify() == (46, None)


EDITS = {
    "created_at": "2020-01-01 00:00:00+00:00",
    "user_id": 999,
    "username": "someone-else",
    "token_id": 999,
    "token_prefix": "udb_xxxxxx",
    "event": "keep",
    "kind": "rest",
    "target": "run 999",
    "forward_sha256": "f" * 64,
    "reverse_sha256": "e" * 64,
    "hosts": ["evil.example"],
    "intent": "nothing to see",
    "outcome": "kept",
    "digests": {"code": "forged"},
    "prev_hash": "a" * 64,
    "hmac": "b" * 64,
}


@pytest.mark.parametrize("field", sorted(EDITS))
def test_deny_an_edited_field_of_an_entry_is_named(db, field):
    ledger(5)
    AuditEntry.objects.filter(seq=3).update(**{field: EDITS[field]})
    count, found = audit_verify()
    assert found is not None and found.seq == 3, found
    with pytest.raises(CommandError, match="entry 3:"):
        call_command("audit_verify")


def test_deny_an_edit_of_the_first_and_of_the_last_entry_is_named(db):
    ledger(4)
    AuditEntry.objects.filter(seq=4).update(outcome="kept")
    assert audit_verify()[1].seq == 4
    AuditEntry.objects.filter(seq=1).update(outcome="kept")
    assert audit_verify()[1].seq == 1


def test_deny_an_edit_in_raw_sql_is_named(db):
    ledger(3)
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {AuditEntry._meta.db_table} SET intent = 'x' WHERE seq = 2")  # noqa: S608
    assert audit_verify()[1].seq == 2


@pytest.mark.parametrize("seq", [1, 3, 5])
def test_deny_a_deleted_entry_is_named(db, seq):
    ledger(5)
    AuditEntry.objects.filter(seq=seq).delete()
    found = audit_verify()[1]
    assert found is not None and found.seq == seq and "missing" in found.reason


def rechain_after(edited: int, *, key: bytes) -> None:
    """What someone with the database but not the key does: edit an entry, then recompute
    every link after it (and sign with the key they have)."""
    AuditEntry.objects.filter(seq=edited).update(outcome="kept", intent="nothing happened")
    previous = AuditEntry.objects.get(seq=edited - 1)
    for entry in AuditEntry.objects.filter(seq__gte=edited).order_by("seq"):
        entry.prev_hash = entry_hash(previous)
        entry.hmac = entry_hmac(entry, key)
        entry.save()
        previous = entry
    AuditHead.objects.update(seq=previous.seq, last_hash=entry_hash(previous))


def test_deny_an_edit_rechained_without_the_key_is_named(db):
    ledger(6)
    rechain_after(3, key=b"a key that is not the ledger's")
    found = audit_verify()[1]
    assert found is not None and found.seq == 3 and "HMAC" in found.reason


def test_sabotage_without_the_hmac_check_an_edit_rechained_without_the_key_passes(db, monkeypatch):
    ledger(6)
    rechain_after(3, key=b"a key that is not the ledger's")
    monkeypatch.setattr(chain, "hmac_ok", lambda entry, key: True)
    assert audit_verify() == (6, None)


def test_an_intact_ledger_verifies(db, capsys):
    ledger(3)
    call_command("audit_verify")
    assert "intact: 3 entries" in capsys.readouterr().out


@pytest.fixture
def no_key(settings) -> None:
    settings.UNDOABLE_AUDIT_KEY = ""
    settings.EMBEDDED_AUDIT_KEY_FILE = None
    settings.DEBUG = False


def test_deny_without_a_key_outside_the_database_nothing_is_appended(db, no_key):
    with pytest.raises(ImproperlyConfigured, match="UNDOABLE_AUDIT_KEY"):
        audit_append(event="run")
    assert not AuditEntry.objects.exists()
    assert [error.id for error in check_audit_key()] == ["audit.E001"]


def test_sabotage_a_constant_key_lets_the_check_pass_and_entries_in(db, no_key, monkeypatch):
    from webapp.audit import checks, services

    monkeypatch.setattr(checks, "audit_key", lambda: b"constant")
    monkeypatch.setattr(services, "audit_key", lambda: b"constant")
    assert check_audit_key() == []
    audit_append(event="run")
    assert AuditEntry.objects.count() == 1
