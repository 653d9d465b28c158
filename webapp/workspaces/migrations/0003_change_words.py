"""One vocabulary for a change (shared/DESIGN.md): `discarded` was "the run failed" and is now
`failed`; `undone` (the person's Discard) and `rolled_back_timeout` become `discarded`, the latter
marked `timed_out` with its reason; `undo_requested` becomes `discard_requested`."""

from django.db import migrations, models

TIMEOUT_REASON = "Discarded automatically: nobody chose Keep or Discard in time (rolled back)."

# Applied in this order: "discarded" must become "failed" before "undone" becomes "discarded".
FORWARD = (
    ("discarded", "failed"),
    ("undone", "discarded"),
    ("undo_requested", "discard_requested"),
)


def forward(apps, schema_editor):
    change = apps.get_model("workspaces", "PendingChange")
    for old, new in FORWARD:
        change.objects.filter(status=old).update(status=new)
    timed_out = change.objects.filter(status="rolled_back_timeout")
    timed_out.filter(message="").update(message=TIMEOUT_REASON)
    timed_out.update(status="discarded", timed_out=True)


def backward(apps, schema_editor):
    change = apps.get_model("workspaces", "PendingChange")
    change.objects.filter(status="discarded", timed_out=True).update(status="rolled_back_timeout")
    for old, new in reversed(FORWARD):
        change.objects.filter(status=new).update(status=old)


class Migration(migrations.Migration):
    dependencies = [
        ("workspaces", "0002_alter_pendingchange_run"),
    ]

    operations = [
        migrations.AddField(
            model_name="pendingchange",
            name="timed_out",
            field=models.BooleanField(default=False),
        ),
        migrations.AlterField(
            model_name="pendingchange",
            name="status",
            field=models.CharField(
                choices=[
                    ("running", "Running"),
                    ("pending", "Waiting for Keep or Discard"),
                    ("keep_requested", "Keeping…"),
                    ("discard_requested", "Discarding…"),
                    ("kept", "Kept"),
                    ("discarded", "Discarded"),
                    ("reversed", "Reversed by Undo"),
                    ("failed", "Failed: nothing was applied"),
                ],
                default="running",
                max_length=24,
            ),
        ),
        migrations.RunPython(forward, backward),
    ]
