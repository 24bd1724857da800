#!/usr/bin/python3
"""Tests of check_manifests.py: the real manifests pass, and each kind of
mistake it exists to catch is caught (so a check that silently stopped
checking fails here).

Usage: check_manifests_test.py --quantd=BIN --manifests=DIR [unittest args]
"""

import argparse
import copy
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_manifests  # noqa: E402

QUANTD = None
MANIFESTS = None


def find(docs, kind):
    return next(d for d in docs if d["kind"] == kind)


def container(docs):
    return find(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]


class CheckManifestsTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.flags = check_manifests.quantd_flags(QUANTD)
        errors = []
        cls.docs = check_manifests.load_path(MANIFESTS, errors)
        cls.load_errors = errors

    def problems(self, mutate):
        docs = copy.deepcopy(self.docs)
        mutate(docs)
        return check_manifests.check(docs, self.flags)

    def assert_caught(self, mutate, needle):
        problems = self.problems(mutate)
        self.assertTrue(any(needle in p for p in problems),
                        f"no problem mentioning {needle!r} in {problems}")

    def test_flags_come_from_the_binary(self):
        self.assertEqual(self.flags["port"], "50051")
        self.assertEqual(self.flags["shutdown_grace"], "30s")
        self.assertIn("max_concurrent_jobs", self.flags)

    def test_real_manifests_pass(self):
        self.assertEqual(self.load_errors, [])
        self.assertEqual(check_manifests.check(self.docs, self.flags), [])

    def test_unknown_flag(self):
        self.assert_caught(lambda d: container(d)["args"].append("--max_jobs=3"),
                           "--max_jobs: quantd has no such flag")

    def test_undefined_env_reference(self):
        self.assert_caught(lambda d: container(d)["env"].clear(), "$(QUANTD_THREADS)")

    def test_wrong_api_version(self):
        def mutate(docs):
            find(docs, "HorizontalPodAutoscaler")["apiVersion"] = "autoscaling/v1"
        self.assert_caught(mutate, "want autoscaling/v2")

    def test_missing_kind(self):
        self.assert_caught(lambda d: d.remove(find(d, "PodDisruptionBudget")),
                           "exactly one PodDisruptionBudget")

    def test_service_selector_mismatch(self):
        def mutate(docs):
            find(docs, "Service")["spec"]["selector"] = {"app": "other"}
        self.assert_caught(mutate, "Service selector")

    def test_pdb_selector_mismatch(self):
        def mutate(docs):
            find(docs, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"] = {"x": "y"}
        self.assert_caught(mutate, "PodDisruptionBudget selector")

    def test_probe_on_wrong_port(self):
        def mutate(docs):
            container(docs)["readinessProbe"]["grpc"]["port"] = 9464
        self.assert_caught(mutate, "readinessProbe checks port 9464")

    def test_probe_not_grpc(self):
        def mutate(docs):
            container(docs)["livenessProbe"] = {"tcpSocket": {"port": 50051}}
        self.assert_caught(mutate, "livenessProbe is not a grpc probe")

    def test_port_flag_disagrees_with_container_port(self):
        def mutate(docs):
            args = container(docs)["args"]
            args[args.index("--port=50051")] = "--port=50052"
        self.assert_caught(mutate, "--port=50052")

    def test_writable_root(self):
        def mutate(docs):
            container(docs)["securityContext"]["readOnlyRootFilesystem"] = False
        self.assert_caught(mutate, "readOnlyRootFilesystem")

    def test_root_user(self):
        def mutate(docs):
            pod = find(docs, "Deployment")["spec"]["template"]["spec"]
            pod["securityContext"]["runAsUser"] = 0
        self.assert_caught(mutate, "runAsUser 0")

    def test_capabilities_kept(self):
        def mutate(docs):
            del container(docs)["securityContext"]["capabilities"]
        self.assert_caught(mutate, "drop ALL")

    def test_missing_limits(self):
        self.assert_caught(lambda d: container(d)["resources"].pop("limits"),
                           "memory request and limit")

    def test_memory_limit_too_small_for_jobs(self):
        def mutate(docs):
            container(docs)["resources"]["limits"]["memory"] = "1Gi"
            container(docs)["resources"]["requests"]["memory"] = "1Gi"
        self.assert_caught(mutate, "exceeds the memory limit 1Gi")

    def test_upload_budget_counts_toward_memory(self):
        def mutate(docs):
            args = container(docs)["args"]
            args[args.index("--max_uploading_bytes=1073741824")] = (
                "--max_uploading_bytes=2147483648")
        self.assert_caught(mutate, "exceeds the memory limit 4Gi")

    def test_grace_shorter_than_drain(self):
        def mutate(docs):
            find(docs, "Deployment")["spec"]["template"]["spec"][
                "terminationGracePeriodSeconds"] = 30
        self.assert_caught(mutate, "running calls would be killed")

    def test_shutdown_grace_flag_counts(self):
        def mutate(docs):
            args = container(docs)["args"]
            args[args.index("--shutdown_grace=30s")] = "--shutdown_grace=1m"
        self.assert_caught(mutate, "--shutdown_grace 60.0s")

    def test_shutdown_force_after_flag_counts(self):
        def mutate(docs):
            container(docs)["args"].append("--shutdown_force_after=15s")
        self.assert_caught(mutate, "--shutdown_force_after 15.0s")

    def test_liveness_kills_draining_pod(self):
        def mutate(docs):
            container(docs)["livenessProbe"]["failureThreshold"] = 3
        self.assert_caught(mutate, "draining pod")

    def test_hpa_targets_other_deployment(self):
        def mutate(docs):
            find(docs, "HorizontalPodAutoscaler")["spec"]["scaleTargetRef"]["name"] = "other"
        self.assert_caught(mutate, "HPA targets")

    def test_service_not_headless(self):
        def mutate(docs):
            del find(docs, "Service")["spec"]["clusterIP"]
        self.assert_caught(mutate, "not headless")

    def test_prometheus_port(self):
        def mutate(docs):
            find(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"][
                "prometheus.io/port"] = "50051"
        self.assert_caught(mutate, "prometheus.io/port 50051")

    def test_dockerfile_cross_check(self):
        good = ('FROM x AS runtime\nUSER 10001:10001\nEXPOSE 50051 9464\n'
                'ENTRYPOINT ["quantd"]\n')
        self.assertEqual(check_manifests.check(self.docs, self.flags, good), [])
        bad = good.replace("USER 10001", "USER 0").replace(" 9464", "")
        problems = check_manifests.check(self.docs, self.flags, bad)
        self.assertTrue(any("USER" in p for p in problems), problems)
        self.assertTrue(any("EXPOSE 9464" in p for p in problems), problems)

    def test_quantities_and_durations(self):
        self.assertEqual(check_manifests.parse_quantity("4Gi"), 4 * 2**30)
        self.assertEqual(check_manifests.parse_quantity("500m"), 0.5)
        self.assertEqual(check_manifests.parse_quantity(2), 2)
        self.assertEqual(check_manifests.parse_duration("1m30s"), 90)
        with self.assertRaises(ValueError):
            check_manifests.parse_duration("30")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--quantd", required=True)
    parser.add_argument("--manifests", required=True)
    opts, rest = parser.parse_known_args()
    QUANTD = opts.quantd
    MANIFESTS = opts.manifests
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
