"""PendingChange.run points at runs.Run (the model moved from queries; its table did not)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0001_initial"),
        ("workspaces", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="pendingchange",
                    name="run",
                    field=models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="pending_change",
                        to="runs.run",
                    ),
                ),
            ],
            database_operations=[],
        ),
    ]
