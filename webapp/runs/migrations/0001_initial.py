"""Run, RunChunk and RunImage moved here from webapp.queries: the app's state gets them, the
database keeps its tables (queries_run, ...) and their rows as they are. The content types move
too, so permissions and admin log entries follow the models."""

import django.db.models.deletion
from django.db import migrations, models

MOVED = ["run", "runchunk", "runimage"]


def content_types_move(apps, schema_editor):
    _content_types_relabel(apps, schema_editor, old="queries", new="runs")


def content_types_back(apps, schema_editor):
    _content_types_relabel(apps, schema_editor, old="runs", new="queries")


def _content_types_relabel(apps, schema_editor, *, old, new):
    content_types = apps.get_model("contenttypes", "ContentType").objects.using(
        schema_editor.connection.alias
    )
    taken = content_types.filter(app_label=new, model__in=MOVED).values_list("model", flat=True)
    content_types.filter(app_label=old, model__in=MOVED).exclude(model__in=list(taken)).update(
        app_label=new
    )


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("queries", "0006_runimage"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="Run",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        (
                            "direction",
                            models.CharField(
                                choices=[("forward", "Forward"), ("reverse", "Reverse (undo)")],
                                max_length=8,
                            ),
                        ),
                        ("code", models.TextField()),
                        ("language", models.CharField(default="python", max_length=16)),
                        (
                            "status",
                            models.CharField(
                                choices=[
                                    ("queued", "Queued"),
                                    ("running", "Running"),
                                    ("succeeded", "Succeeded"),
                                    ("failed", "Failed"),
                                    ("timed_out", "Timed out"),
                                    ("cancelled", "Cancelled"),
                                ],
                                db_index=True,
                                default="queued",
                                max_length=16,
                            ),
                        ),
                        ("exit_code", models.IntegerField(blank=True, null=True)),
                        ("signal", models.IntegerField(blank=True, null=True)),
                        ("limit", models.CharField(blank=True, default="", max_length=16)),
                        ("timed_out", models.BooleanField(default=False)),
                        ("oom_killed", models.BooleanField(default=False)),
                        ("truncated", models.BooleanField(default=False)),
                        ("error", models.TextField(blank=True)),
                        ("output_bytes", models.PositiveIntegerField(default=0)),
                        ("output_cap_bytes", models.PositiveIntegerField(default=1000000)),
                        ("cancel_requested", models.BooleanField(default=False)),
                        ("worker", models.CharField(blank=True, max_length=200)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("started_at", models.DateTimeField(blank=True, null=True)),
                        ("finished_at", models.DateTimeField(blank=True, null=True)),
                        ("heartbeat_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "query",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="runs",
                                to="queries.query",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "queries_run",
                        "ordering": ["-created_at", "-id"],
                    },
                ),
                migrations.CreateModel(
                    name="RunChunk",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("seq", models.PositiveIntegerField()),
                        ("stream", models.CharField(max_length=6)),
                        ("text", models.TextField()),
                        (
                            "run",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="chunks",
                                to="runs.run",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "queries_runchunk",
                        "ordering": ["seq"],
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("run", "seq"), name="unique_run_chunk_seq"
                            )
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="RunImage",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("position", models.PositiveSmallIntegerField()),
                        ("name", models.CharField(max_length=200)),
                        ("mime", models.CharField(max_length=32)),
                        ("data", models.BinaryField()),
                        (
                            "run",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="images",
                                to="runs.run",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "queries_runimage",
                        "ordering": ["position"],
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("run", "position"), name="unique_run_image_position"
                            )
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(content_types_move, content_types_back),
    ]
