"""Terraform's grants against what the code calls: for every setting of the variables that change grants,
each identity holds every permission functions/core/permissions.py lists for it (through Google's published
permission lists of the roles granted, tests/data/iam/), on the resource it calls, and no grant is idle."""

from __future__ import annotations

from itertools import product

import pytest

from functions.core import permissions as p
from tests.contract.iam import Deployment

SETTINGS = [
    dict(
        functions_create_clusters=create,
        image_cache=cache,
        tracking_vertex=vertex,
        policy_buckets=policy,
        dataset_buckets=datasets,
        create_nat=nat,
        policy_namespaces=namespaces,
        operators=operators,
    )
    for (create, cache, vertex), policy, datasets, nat, namespaces, operators in product(
        ((False, False, False), (True, False, True), (False, True, False), (True, True, True)),
        ([], ["shared-checkpoints"]),
        ([], ["datasets-a", "datasets-b"]),
        (True, False),
        (["default"], ["default", "team-a"]),
        ([], ["user:ops@example.com", "group:ml@example.com"]),
    )
]


DEFAULTS = dict(
    functions_create_clusters=False,
    image_cache=False,
    tracking_vertex=False,
    create_nat=True,
    policy_namespaces=["default"],
)


def label(settings: dict) -> str:
    """The values that differ from Terraform's defaults."""
    return " ".join(f"{k}={v}" for k, v in settings.items() if v != DEFAULTS.get(k, []))


def switches(settings: dict) -> list[str]:
    """permissions.py's switches these variable values turn on."""
    return [s for s in p.SWITCHES if settings.get(s)]


@pytest.mark.parametrize("settings", SETTINGS, ids=label)
def test_every_identity_holds_what_its_code_paths_call(settings):
    deployment = Deployment(**settings)
    grants, roles = deployment.grants(), deployment.roles()
    unknown_roles = {g.role for g in grants} - set(roles)
    assert not unknown_roles, f"roles without a vendored permission list (tests/data/iam/roles.json): {unknown_roles}"
    missing = []
    for identity in p.IDENTITIES:
        for use in p.uses_of(identity, switches(settings)):
            for subject, name in product(deployment.subjects(identity), deployment.names(use.resource)):
                if not deployment.covering(grants, roles, use.identity, subject, use.resource, name, use.permission):
                    missing.append(
                        f"{identity} {subject or ''} lacks {use.permission} on {name or use.resource}: {use.why}"
                    )
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize("settings", SETTINGS[::7], ids=label)
def test_no_grant_is_idle(settings):
    """Least privilege the other way round: each granted role gives its identity at least one permission that
    a listed call of it needs on that resource (so an unused identity or grant, like the scheduler's, fails)."""
    deployment = Deployment(**settings)
    roles = deployment.roles()
    uses = p.uses_of
    # What Google creates on first use can only be granted on from the project (it does not exist before).
    project_wide = {"project"} | {r.resource for r in p.GOOGLE_RESOURCES}
    for grant in deployment.grants():
        if grant.address.startswith("google:"):
            continue  # Google's own grants to its agents: not ours to trim
        needed = {
            u.permission
            for u in uses(grant.identity, switches(settings))
            if (grant.resource == "project" and u.resource in project_wide) or u.resource == grant.resource
        }
        assert needed & roles[grant.role], f"{grant.address}: {grant.role} gives {grant.identity} nothing it uses"


def test_the_roles_that_follow_a_switch():
    plain, creating = Deployment(), Deployment(functions_create_clusters=True)
    gke = {g.role for g in plain.grants() if g.identity == p.FUNCTIONS and g.resource == "project"}
    assert gke == {"roles/container.developer"}
    assert {g.role for g in creating.grants() if g.identity == p.FUNCTIONS and g.resource == "project"} == {
        "roles/container.admin"
    }
    assert any(g.resource == "service-account:compute-default" for g in creating.grants())
    assert not any(g.resource == "service-account:compute-default" for g in plain.grants())


def test_the_trainer_may_read_the_bucket_pyarrow_asks_about():
    """Blocker 1 of issue 20, in grant terms: objectUser alone lacks storage.buckets.get."""
    deployment = Deployment(policy_buckets=["shared-checkpoints"])
    roles = deployment.roles()
    assert "storage.buckets.get" not in roles["roles/storage.objectUser"]
    for name in (deployment.bucket("runs"), "shared-checkpoints"):
        held = set().union(*(roles[g.role] for g in deployment.grants() if g.identity == p.TRAINER and g.name == name))
        assert {"storage.buckets.get", "storage.objects.create", "storage.objects.delete"} <= held, name


def test_every_function_is_built_and_invoked_by_its_own_identity():
    deployment = Deployment()
    for function in deployment.module.instances("google_cloudfunctions2_function"):
        [build] = function.blocks("build_config")
        assert str(deployment.module.eval(build.body["service_account"], dict(function.scope))) == (
            "${google_service_account.function_build.id}"
        )
    invoked = {g.name for g in deployment.grants() if g.identity == p.TRIGGER and g.resource == "service:functions"}
    assert invoked == set(deployment.names("service:functions"))


def test_nat_in_every_region_runs_may_use():
    deployment = Deployment(policy_regions=["europe-west4"])
    nat = {i.get("region") for i in deployment.module.instances("google_compute_router_nat")}
    env = deployment.module.local("function_env")
    assert nat == {"us-central1", "europe-west4"} == set(env["RAYTUNE_POLICY_REGIONS"].split(","))
    assert not list(Deployment(create_nat=False).module.instances("google_compute_router_nat"))


def test_the_policy_buckets_are_the_granted_ones():
    """What the functions let a config name is what Terraform grants: config_uri where the functions may read,
    storage_path where the trainer may write, gs:// datasets where it may read."""
    deployment = Deployment(policy_buckets=["shared"], dataset_buckets=["data"])
    env, grants = deployment.module.local("function_env"), deployment.grants()
    runs, configs = deployment.bucket("runs"), deployment.bucket("configs")

    def readable(identity: str) -> set[str]:
        roles = deployment.roles()
        return {g.name for g in grants if g.identity == identity and "storage.objects.get" in roles[g.role]}

    def writable() -> set[str]:
        roles = deployment.roles()
        return {g.name for g in grants if g.identity == p.TRAINER and "storage.objects.create" in roles[g.role]}

    assert set(env["RAYTUNE_POLICY_BUCKETS"].split(",")) == {runs, configs, "shared"} <= readable(p.FUNCTIONS)
    assert set(env["RAYTUNE_POLICY_STORAGE_BUCKETS"].split(",")) == {runs, "shared"} == writable()
    assert set(env["RAYTUNE_POLICY_DATASET_BUCKETS"].split(",")) == {runs, "shared", "data"} == readable(p.TRAINER)


def addresses(value) -> list:
    """The resource instances a depends_on list names (a for_each resource stands for all its instances)."""
    found = []
    for item in value if isinstance(value, list) else [value]:
        found += list(item.values()) if isinstance(item, dict) else item if isinstance(item, list) else [item]
    return found


def test_functions_are_created_once_their_build_grants_are_effective():
    """IAM grants take minutes to take effect: a function whose build starts at once can be refused its source
    (the provider's own builder example waits 60 s and still fails: hashicorp/terraform-provider-google#20571).
    Every function waits on the apply's access probe (tests/contract/test_build_access.py runs it), which runs
    again whenever a grant its build identity holds is replaced."""
    deployment = Deployment()
    build_grants = {
        g.address for g in deployment.grants() if g.identity == p.FUNCTION_BUILD and not g.address.startswith("google:")
    }
    assert len(build_grants) == 3, build_grants  # logs, Artifact Registry, the sources bucket (and the probe)
    [probe] = deployment.module.instances("terraform_data")
    triggered = {str(v.ref).removesuffix(".id") for v in probe.get("triggers_replace").values()}
    assert build_grants <= triggered, build_grants - triggered
    for function in deployment.module.instances("google_cloudfunctions2_function"):
        waits = [i for i in addresses(function.get("depends_on")) if i.kind == "terraform_data"]
        assert waits, f"{function.address} is created as soon as its build identity's grants are written"


def test_the_function_build_reads_only_cloud_functions_copy_of_its_source():
    """The blocker of issue 37 in grant terms: the build's object read is held to gcf-v2-sources-<number>-<region>
    and reaches no bucket of ours."""
    deployment = Deployment(policy_buckets=["shared"], dataset_buckets=["data"])
    roles, grants = deployment.roles(), [g for g in deployment.grants() if g.identity == p.FUNCTION_BUILD]
    [sources] = deployment.names("bucket:gcf-sources")
    assert sources == "gcf-v2-sources-${data.google_project.this.number}-us-central1"
    readers = [g for g in grants if "storage.objects.get" in roles[g.role]]
    assert readers and all(g.applies_to(f"projects/_/buckets/{sources}/objects/f/function-source.zip") for g in readers)
    for bucket in ("runs", "configs", "build"):
        name = f"projects/_/buckets/{deployment.bucket(bucket)}/objects/x"
        assert not any(g.applies_to(name) and g.resource == "project" for g in readers), bucket
    # Of ours, only what the apply's access probe stages (terraform/iam.tf, function_build_access).
    build = f"projects/_/buckets/{deployment.bucket('build')}/objects/"
    assert all(g.applies_to(build + "function-build-probe/1-a.tgz") for g in readers)
    for other in ("function-source.zip", "image-source/1.tgz", "function-build-probe", "function-build-probex/a"):
        assert not any(g.applies_to(build + other) for g in readers), other
    assert not any(g.resource.startswith("bucket:") for g in grants)


@pytest.mark.parametrize("more", [["europe-west4"], ["europe-west4", "us-east5"]])
def test_every_region_gets_its_cluster_and_nat_and_every_identity_reaches_the_shared_data(more):
    """Issue 55, for two and three regions: an Autopilot cluster of the same name with the Ray operator and Cloud NAT
    in each, var.region's first (its state address is the single cluster's); the data in one multi-region bucket and
    one multi-region image repository; the identities that act in a region (the nodes, the trainer, the functions)
    are project-wide, so every grant that serves the first region serves the others."""
    one, many = Deployment(), Deployment(policy_regions=more, data_location="US", image_location="us")
    clusters = {i.address: i.get("location") for i in many.module.instances("google_container_cluster")}
    assert clusters == {f"google_container_cluster.ray[{n}]": r for n, r in enumerate(["us-central1", *more])}
    assert {i.get("name") for i in many.module.instances("google_container_cluster")} == {"raytune"}
    nat = {i.get("region") for i in many.module.instances("google_compute_router_nat")}
    assert nat == {"us-central1", *more}
    assert many.module._resource("google_storage_bucket", "runs").get("location") == "US"
    assert many.module._resource("google_artifact_registry_repository", "trainer").get("location") == "us"
    assert one.module._resource("google_storage_bucket", "runs").get("location") == "us-central1"
    env = many.module.local("function_env")
    assert env["RAYTUNE_POLICY_REGIONS"].split(",") == ["us-central1", *more]
    assert (env["RAYTUNE_POLICY_REGION_SECONDS"], env["RAYTUNE_POLICY_DEFAULT_REGIONS"]) == ("1800", "")
    assert {(g.identity, g.resource, g.name) for g in many.grants()} == {
        (g.identity, g.resource, g.name) for g in one.grants()
    }, "no grant names a region: one set serves them all"


def test_the_image_cache_builder_writes_and_its_vm_reads_only_the_scratch_space_raytune_image_names():
    """image_cache=true: the build's object writes and the VM's reads in the build bucket are held to image-cache/,
    the --gcs-path `raytune image --cache` gives the builder, and the VM is the account it passes by default; off,
    Terraform makes none of it."""
    from functions.cli.image import Cache, Target, cache_command

    deployment = Deployment(image_cache=True)
    roles, grants = deployment.roles(), deployment.grants()
    build = deployment.bucket("build")
    target = Target(project=deployment.project, region="us-central1", build_bucket=build)
    substitutions = dict(
        pair.split("=", 1)
        for pair in next(a for a in cache_command(target, Cache("us-central1-b")) if "_LOGS=" in a)
        .removeprefix("--substitutions=")
        .split(",")
    )
    [vm] = [i for i in deployment.module.instances("google_service_account") if "image_cache" in i.address]
    assert f"{vm.get('account_id')}@{deployment.project}.iam.gserviceaccount.com" == substitutions["_VM_ACCOUNT"]
    scratch = substitutions["_LOGS"].replace("gs://", "projects/_/buckets/").replace(f"{build}/", f"{build}/objects/")
    objects = f"projects/_/buckets/{build}/objects/"
    for identity, permission in ((p.IMAGE_BUILD, "storage.objects.create"), (p.IMAGE_CACHE_VM, "storage.objects.get")):
        held = [g for g in grants if g.identity == identity and g.name == build and permission in roles[g.role]]
        assert held and all(g.applies_to(scratch + "daisy-x/sources/startup.sh") for g in held), identity
        for elsewhere in ("image-source/1.tgz", "function-build-probe/1.tgz", "image-cachex/a"):
            assert not any(g.applies_to(objects + elsewhere) for g in held), (identity, elsewhere)
    assert not any(g.identity == p.IMAGE_CACHE_VM for g in Deployment().grants())
    assert not any("compute." in " ".join(roles[g.role]) for g in Deployment().grants() if g.identity == p.IMAGE_BUILD)
