#!/usr/bin/python3
"""Creates what the real-Nova test cloud needs inside its services; idempotent.

  setup_cloud.py identity   once keystone is up: the service project, the
                            nova/placement/glance/neutron users (admin in
                            service), and the catalog (identity, compute,
                            placement, image, network) on the URLs given
  setup_cloud.py resources  once nova and glance are up: the flavor and the
                            (tiny, active) image the tests boot, and a
                            flavor no host can take
  setup_cloud.py zones      once the compute hosts are mapped: host
                            aggregates e2e-az1 (nova-e2e), e2e-az2
                            (nova-e2e-2) and e2e-az3 (nova-e2e-3), each its
                            own availability zone

Settings come from the environment (passwords never from the command line):
NOVA_E2E_KEYSTONE, NOVA_E2E_ADMIN_PW, NOVA_E2E_SERVICE_PW, NOVA_E2E_*_URL,
NOVA_E2E_FLAVOR, NOVA_E2E_FLAVOR_NOHOST, NOVA_E2E_IMAGE.
"""
import os
import sys
import time

from keystoneauth1 import session
from keystoneauth1.identity import v3

E = os.environ


def admin_session():
    auth = v3.Password(auth_url=E["NOVA_E2E_KEYSTONE"] + "/v3", username="admin",
                       password=E["NOVA_E2E_ADMIN_PW"], project_name="admin",
                       user_domain_name="Default", project_domain_name="Default")
    return session.Session(auth=auth)


def one(items, what):
    if len(items) > 1:
        sys.exit("setup_cloud: more than one %s" % what)
    return items[0] if items else None


def identity(s):
    # Keystone at the URL given, not the catalog's: the catalog may still
    # name another address (a directory first started on another
    # NOVA_E2E_HOST), which this fixes.
    ks = {"endpoint_override": E["NOVA_E2E_KEYSTONE"] + "/v3"}
    get = lambda path: s.get(path, **ks).json()
    post = lambda path, body: s.post(path, json=body, **ks).json()

    project = one(get("/projects?name=service")["projects"], "service project")
    if project is None:
        project = post("/projects", {"project": {"name": "service", "domain_id": "default"}})["project"]
    admin_role = one(get("/roles?name=admin")["roles"], "admin role")
    for name in ("nova", "placement", "glance", "neutron"):
        user = one(get("/users?name=" + name)["users"], "user " + name)
        if user is None:
            user = post("/users", {"user": {"name": name, "domain_id": "default",
                                            "password": E["NOVA_E2E_SERVICE_PW"]}})["user"]
        s.put("/projects/%s/users/%s/roles/%s" % (project["id"], user["id"], admin_role["id"]), **ks)

    catalog = {
        "identity": ("keystone", E["NOVA_E2E_KEYSTONE"] + "/v3"),
        "compute": ("nova", E["NOVA_E2E_COMPUTE_URL"]),
        "placement": ("placement", E["NOVA_E2E_PLACEMENT_URL"]),
        "image": ("glance", E["NOVA_E2E_IMAGE_URL"]),
        "network": ("neutron", E["NOVA_E2E_NETWORK_URL"]),
    }
    for stype, (name, url) in catalog.items():
        svc = one(get("/services?type=" + stype)["services"], "service " + stype)
        if svc is None:
            svc = post("/services", {"service": {"type": stype, "name": name}})["service"]
        have = {e["interface"]: e for e in get("/endpoints?service_id=" + svc["id"])["endpoints"]}
        for iface in ("public", "internal", "admin"):
            e = have.get(iface)
            if e is not None and e["url"] == url:
                continue
            if e is not None:
                s.delete("/endpoints/" + e["id"], **ks)
            post("/endpoints", {"endpoint": {"service_id": svc["id"], "interface": iface,
                                             "url": url, "region_id": "RegionOne"}})


def resources(s):
    nova = {"service_type": "compute", "interface": "public", "region_name": "RegionOne"}
    glance = {"service_type": "image", "interface": "public", "region_name": "RegionOne"}

    flavors = s.get("/flavors/detail?is_public=None", endpoint_filter=nova).json()["flavors"]
    # The tiny flavor every test boots, and one no host can take: its disk
    # (which no quota limits) is far beyond the fake driver's 600000 GB, so
    # a create passes the API and quotas and ends in ERROR "No valid host".
    for name, disk in ((E["NOVA_E2E_FLAVOR"], 1), (E["NOVA_E2E_FLAVOR_NOHOST"], 100000000)):
        if not any(f["name"] == name for f in flavors):
            s.post("/flavors", endpoint_filter=nova, json={"flavor": {
                "name": name, "id": name, "ram": 64, "vcpus": 1, "disk": disk}})

    name = E["NOVA_E2E_IMAGE"]
    images = s.get("/v2/images?name=" + name, endpoint_filter=glance).json()["images"]
    for img in images:
        if img["status"] != "active":  # a half-made one from an interrupted run
            s.delete("/v2/images/" + img["id"], endpoint_filter=glance)
    if not any(img["status"] == "active" for img in images):
        img = s.post("/v2/images", endpoint_filter=glance, json={
            "name": name, "disk_format": "raw", "container_format": "bare",
            "visibility": "public"}).json()
        # The fake virt driver boots nothing: a few bytes make the image active.
        s.put("/v2/images/%s/file" % img["id"], endpoint_filter=glance,
              data=b"orchestrate nova-e2e test image\n" * 32,
              headers={"Content-Type": "application/octet-stream"})
        for _ in range(100):
            if s.get("/v2/images/" + img["id"], endpoint_filter=glance).json()["status"] == "active":
                break
            time.sleep(0.2)
        else:
            sys.exit("setup_cloud: image %s never became active" % name)


# The availability zones: one aggregate each, named as its zone, holding
# one compute host. Every host is in one: Nova's default zone ("nova",
# the hosts in no zone aggregate) confines nothing in Zed, whose
# placement pre-filter maps a requested zone to its aggregates and, for a
# zone without any, lets the server land on any host (found by the
# reaper's e2e test: a create asking for "nova" landed in e2e-az2). Adding
# a host that has servers to a zone's aggregate is allowed (only changing
# an aggregate's zone checks for servers).
ZONES = {"e2e-az1": "nova-e2e", "e2e-az2": "nova-e2e-2", "e2e-az3": "nova-e2e-3"}


def zones(s):
    nova = {"service_type": "compute", "interface": "public", "region_name": "RegionOne"}
    aggs = {a["name"]: a for a in s.get("/os-aggregates", endpoint_filter=nova).json()["aggregates"]}
    for zone, host in ZONES.items():
        agg = aggs.get(zone)
        if agg is None:
            agg = s.post("/os-aggregates", endpoint_filter=nova, json={"aggregate": {
                "name": zone, "availability_zone": zone}}).json()["aggregate"]
        if agg.get("availability_zone") != zone:
            sys.exit("setup_cloud: aggregate %s has availability zone %r, want %r" % (zone, agg.get("availability_zone"), zone))
        if host not in (agg.get("hosts") or []):
            s.post("/os-aggregates/%s/action" % agg["id"], endpoint_filter=nova,
                   json={"add_host": {"host": host}})


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in ("identity", "resources", "zones"):
        sys.exit("usage: setup_cloud.py identity|resources|zones")
    s = admin_session()
    {"identity": identity, "resources": resources, "zones": zones}[sys.argv[1]](s)


if __name__ == "__main__":
    main()
