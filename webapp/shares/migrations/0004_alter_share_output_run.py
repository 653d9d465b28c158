"""Share.output_run points at runs.Run (the model moved from queries; its table did not)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0001_initial"),
        ("shares", "0003_share_output_run"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="share",
                    name="output_run",
                    field=models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="runs.run",
                    ),
                ),
            ],
            database_operations=[],
        ),
    ]
