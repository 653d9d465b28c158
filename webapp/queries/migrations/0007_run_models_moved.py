"""Run, RunChunk and RunImage left this app's state for webapp.runs (runs/0001_initial.py);
their tables and rows stay where they are."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("queries", "0006_runimage"),
        ("runs", "0001_initial"),
        ("shares", "0004_alter_share_output_run"),
        ("workspaces", "0002_alter_pendingchange_run"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name="RunImage"),
                migrations.DeleteModel(name="RunChunk"),
                migrations.DeleteModel(name="Run"),
            ],
            database_operations=[],
        ),
    ]
