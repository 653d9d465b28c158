"""Workspaces become objects of their own (issue 43): a Workspace has an owner, and a query
points at one through WorkspaceUse, so several queries (and the API's actions) may share one.
Every existing workspace keeps its id, its folder and its query."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def forward(apps, schema_editor):
    workspace = apps.get_model("workspaces", "Workspace")
    use = apps.get_model("workspaces", "WorkspaceUse")
    for row in workspace.objects.select_related("query").iterator():
        row.owner_id = row.query.owner_id
        row.save(update_fields=["owner"])
        use.objects.create(query_id=row.query_id, workspace_id=row.pk)


def backward(apps, schema_editor):
    workspace = apps.get_model("workspaces", "Workspace")
    use = apps.get_model("workspaces", "WorkspaceUse")
    # One query per workspace again: the first to use it; a workspace nobody uses goes.
    for row in workspace.objects.iterator():
        first = use.objects.filter(workspace_id=row.pk).order_by("query_id").first()
        if first is None:
            row.delete()
        else:
            row.query_id = first.query_id
            row.save(update_fields=["query"])


class Migration(migrations.Migration):
    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("queries", "0007_run_models_moved"),
        ("workspaces", "0003_change_words"),
    ]

    operations = [
        migrations.AddField(
            model_name="workspace",
            name="owner",
            field=models.ForeignKey(
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="workspaces",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.CreateModel(
            name="WorkspaceUse",
            fields=[
                (
                    "query",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="workspace_use",
                        serialize=False,
                        to="queries.query",
                    ),
                ),
                (
                    "workspace",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="uses",
                        to="workspaces.workspace",
                    ),
                ),
            ],
        ),
        migrations.AlterField(
            model_name="workspace",
            name="query",
            field=models.OneToOneField(
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="workspace",
                to="queries.query",
            ),
        ),
        migrations.RunPython(forward, backward),
        migrations.RemoveField(model_name="workspace", name="query"),
        migrations.AlterField(
            model_name="workspace",
            name="owner",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="workspaces",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
    ]
