from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps


def copy_from_query(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    # Shares made before the field existed take their query's verdict: defaulting them to
    # "reversible" would let a fork of an irreversible action run without the confirmation.
    Share = apps.get_model("shares", "Share")
    Query = apps.get_model("queries", "Query")
    irreversible = Query.objects.filter(reversible=False).values("pk")
    Share.objects.filter(query__in=irreversible).update(reversible=False)


class Migration(migrations.Migration):
    dependencies = [
        ("queries", "0001_initial"),
        ("shares", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="share",
            name="reversible",
            field=models.BooleanField(default=True),
        ),
        migrations.RunPython(copy_from_query, migrations.RunPython.noop),
    ]
