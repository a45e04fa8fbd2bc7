"""The saga console in a real browser: headless Chromium (Debian's chromium and
chromium-driver, driven by python3-selenium) against `sagafeed run --http` on
a private cosmolite, used as a person would:

  list      the sagas list shows every order with its status and the counts
  filter    status and partition key filters narrow it to what the data says
  saga      o-poor's timeline: every transition (outbox event) and effect
            (marker) in the database is a row, with its id as the proof
  hostile   an id '"><img src=x onerror=...>' and a key '<script>...' are
            shown as text: no element made of them, no alert, no script run
  refuse    replay without the token: refused (401), nothing marked
  replay    log in with the token, replay o-bad's key (confirmed): it settles
  pause     pause with a reason and resume from the fleet page (needs the token)
  charts    the charts page draws the samples the process keeps in memory

Each page is saved as a PNG into $SF_CONSOLE_SHOTS (docs/console/ holds the
committed set). Skips (77) when chromium, chromedriver or selenium is missing.
"""
import os
import shutil
import sys
import tempfile
import time
import unittest

try:
    from selenium import webdriver
    from selenium.common.exceptions import (NoAlertPresentException, NoSuchElementException,
                                            StaleElementReferenceException)
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import Select, WebDriverWait
except ImportError:
    print("SKIP: python3-selenium is not installed (apt-get install python3-selenium)")
    sys.exit(77)

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
if not (os.path.exists(CHROMIUM) and os.path.exists(DRIVER)):
    print("SKIP: chromium / chromium-driver are not installed")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(__file__))
import console_harness as h  # noqa: E402

WAIT = 60  # seconds any one thing may take on a loaded machine


def browser(profile):
    o = Options()
    o.binary_location = CHROMIUM
    for a in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              "--disable-dev-shm-usage", "--window-size=1280,900", "--user-data-dir=" + profile):
        o.add_argument(a)
    return webdriver.Chrome(service=Service(DRIVER), options=o)


class Console(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.world = h.World()
        cls.base = cls.world.start("run")
        cls.world.settle()
        cls.profile = tempfile.TemporaryDirectory(prefix="sf-chromium-")
        cls.d = browser(cls.profile.name)
        cls.shots = os.environ.get("SF_CONSOLE_SHOTS", cls.world.tmp.name)
        os.makedirs(cls.shots, exist_ok=True)

    @classmethod
    def tearDownClass(cls):
        cls.d.quit()
        cls.profile.cleanup()
        cls.world.stop()

    # helpers ------------------------------------------------------------------

    def open(self, hash_):
        self.d.get(self.base + "/ui/" + hash_)
        self.d.refresh()  # a hash-only change would not reload the page

    def wait(self, cond, what):
        try:
            # the pages re-render what they show: an element may go stale between two looks
            return WebDriverWait(self.d, WAIT, ignored_exceptions=(
                NoSuchElementException, StaleElementReferenceException)).until(cond)
        except Exception:
            self.fail("%s (page: %s)" % (what, self.d.find_element(By.TAG_NAME, "main").text))

    def rows(self, table):
        return self.d.find_elements(By.CSS_SELECTOR, "#%s tbody tr" % table)

    def cells(self, table):
        return [[td.text for td in r.find_elements(By.TAG_NAME, "td")] for r in self.rows(table)]

    def shot(self, name):
        self.d.save_screenshot(os.path.join(self.shots, name))

    def no_alert(self):
        try:
            a = self.d.switch_to.alert
            self.fail("an alert ran: %r" % a.text)
        except NoAlertPresentException:
            pass

    # the tests, in order ------------------------------------------------------

    def test_1_list_and_counts(self):
        self.open("#/sagas")
        self.wait(lambda d: len(self.rows("sagas")) == 5, "five sagas listed")
        self.wait(lambda d: d.find_element(By.ID, "count-completed").text.startswith("2"),
                  "two completed counted")
        counts = {s: self.d.find_element(By.ID, "count-" + s).text.split("\n")[0]
                  for s in h.STATUSES}
        self.assertEqual(counts["completed"], "2")
        self.assertEqual(counts["cancelled"], "1")
        self.assertEqual(counts["parked"], "2")
        by_id = {c[0]: c for c in self.cells("sagas")}
        self.assertEqual(by_id["o-1"][1], "completed")
        self.assertEqual(by_id["o-poor"][1], "cancelled")
        self.assertEqual(by_id["o-poor"][3], "insufficient balance for 50")
        self.shot("sagas.png")

    def test_2_filter(self):
        self.open("#/sagas")
        self.wait(lambda d: len(self.rows("sagas")) == 5, "five sagas listed")
        Select(self.d.find_element(By.ID, "f-status")).select_by_value("completed")
        self.d.find_element(By.ID, "f-go").click()
        self.wait(lambda d: sorted(c[0] for c in self.cells("sagas")) == ["o-1", "o-2"],
                  "only the completed orders")
        Select(self.d.find_element(By.ID, "f-status")).select_by_value("")
        self.d.find_element(By.ID, "f-key").send_keys("c-2")
        self.d.find_element(By.ID, "f-go").click()
        self.wait(lambda d: [c[0] for c in self.cells("sagas")] == ["o-poor"],
                  "only customer c-2's order")
        self.d.find_element(By.ID, "f-key").clear()
        self.d.find_element(By.ID, "f-q").send_keys("o-")
        self.d.find_element(By.ID, "f-go").click()
        self.wait(lambda d: sorted(c[0] for c in self.cells("sagas")) ==
                  ["o-1", "o-2", "o-bad", "o-poor"], "the ids starting with o-")

    def test_3_saga_timeline(self):
        self.open("#/sagas?key=c-2")
        link = self.wait(EC.element_to_be_clickable((By.LINK_TEXT, "o-poor")), "o-poor linked")
        link.click()
        self.wait(lambda d: len(self.rows("timeline")) > 0, "a timeline")
        events = self.world.query("orders", "SELECT * FROM c WHERE c.sfKind = 'event' AND "
                                  "c.sagaId = 'o-poor'")
        markers = []
        for coll in ("orders", "products", "customers", "shipments"):
            markers += self.world.query(coll, "SELECT * FROM c WHERE c.sfKind = 'marker' AND "
                                        "c.sagaId = 'o-poor'")
        tl = self.cells("timeline")
        self.assertEqual(len(tl), len(events) + len(markers), tl)
        kinds = [r[1] for r in tl]
        self.assertEqual(kinds.count("transition"), len(events))
        for e in events:
            p = e["payload"]
            row = [r for r in tl if r[5].startswith("outbox event " + e["id"])]
            self.assertEqual(len(row), 1, (e["id"], tl))
            self.assertIn("%s → %s" % (p["from"], p["to"]), row[0][2])
            # every transition of o-poor ended a step (or the compensation) that the
            # item records Cosmos retries for: none were injected, so 0 each
            self.assertEqual(row[0][4], "0", (e["id"], tl))
        for m in markers:
            row = [r for r in tl if r[5] == "marker " + m["id"]]
            self.assertEqual(len(row), 1, (m["id"], tl))
            self.assertEqual(row[0][1], "effect" if m["phase"] == "do" else "compensation")
            self.assertIn("%s %s #%d" % (m["phase"], m["step"], m["element"]), row[0][2])
        # the compensation path: reserve done then undone, the saga cancelled with its reason
        self.assertEqual([r[0] for r in tl], sorted(r[0] for r in tl))
        self.assertIn("cancelled", self.d.find_element(By.ID, "saga-status").text)
        self.assertIn("insufficient balance for 50", self.d.find_element(By.ID, "saga-reason").text)
        steps = {c[0]: c for c in self.cells("steps")}
        self.assertEqual(steps["reserve"][2], "compensated")
        heads = [th.get_attribute("textContent") for th in
                 self.d.find_elements(By.CSS_SELECTOR, "#timeline thead th")]
        self.assertEqual(heads[4], "Cosmos retries", heads)
        heads = [th.get_attribute("textContent") for th in
                 self.d.find_elements(By.CSS_SELECTOR, "#steps thead th")]
        self.assertEqual(heads[5:7], ["Cosmos retries", "Undo retries"], heads)
        # reserve ran and was undone, charge failed (its do ran, its undo too), ship never ran
        self.assertEqual(steps["reserve"][5:7], ["0", "0"], steps)
        self.assertEqual(steps["charge"][5:7], ["0", "0"], steps)
        self.assertEqual(steps["ship"][5:7], ["", ""], steps)
        self.shot("saga.png")

    def test_3b_pending_wait_and_deadline(self):
        # an item the workflow's filter leaves alone (type "draft"), shaped as a saga set
        # aside by an await step with a deadline: the console shows both as pending
        since, until, deadline = 1796000000000, 1796000060000, 1796003600000
        self.world.upsert("orders", {"id": "o-wait", "type": "draft", "customerId": "c-9",
                                     "status": "charged", "sfDeadline": deadline,
                                     "sfWait": {"step": "ship", "since": since, "until": until,
                                                "container": "shipments"}})
        self.open("#/saga/order-fulfilment/o-wait")
        self.wait(lambda d: len(self.rows("timeline")) == 2, "the wait and the deadline")
        tl = {r[1]: r for r in self.cells("timeline")}
        self.assertEqual(tl["waiting"][2], "waiting in step ship")
        self.assertEqual(tl["waiting"][3], "until 2026-11-30T00:54:20Z")
        self.assertEqual(tl["waiting"][5], "pending")
        self.assertEqual(tl["deadline"][0], "2026-11-30T01:53:20Z")
        self.assertIn("waiting", self.d.find_element(By.ID, "saga-status").text)

    def test_4_hostile_ids_are_text(self):
        self.open("#/sagas")
        self.wait(lambda d: len(self.rows("sagas")) == 5, "five sagas listed")
        by_id = {c[0]: c for c in self.cells("sagas")}
        self.assertIn(h.HOSTILE_IMG, by_id)
        self.assertEqual(by_id[h.HOSTILE_IMG][4], h.HOSTILE_SCRIPT)
        self.assertEqual(self.d.find_elements(By.CSS_SELECTOR, "main img, main script"), [])
        self.no_alert()
        self.d.find_element(By.LINK_TEXT, h.HOSTILE_IMG).click()
        self.wait(lambda d: d.find_element(By.ID, "saga-id").text == h.HOSTILE_IMG,
                  "the hostile id as the title")
        self.wait(lambda d: len(self.rows("timeline")) > 0, "its timeline")
        self.assertIn(h.HOSTILE_SCRIPT, self.d.find_element(By.ID, "saga-item").text)
        self.assertEqual(self.d.find_elements(By.CSS_SELECTOR, "main img, main script"), [])
        self.open("#/parked")
        self.wait(lambda d: len(self.rows("parked")) >= 2, "parked records")
        self.assertTrue(any(c[0] == 'orders|["%s"]' % h.HOSTILE_SCRIPT for c in self.cells("parked")))
        self.assertEqual(self.d.find_elements(By.CSS_SELECTOR, "main img, main script"), [])
        self.no_alert()

    def replay_button(self, key):
        for r in self.rows("parked"):
            if r.find_elements(By.TAG_NAME, "td")[0].text == key:
                return r.find_element(By.CLASS_NAME, "replay-key")
        self.fail("no replay button for %s" % key)

    def test_5_replay_refused_without_token(self):
        self.open("#/parked")
        self.wait(lambda d: len(self.rows("parked")) >= 2, "parked records")
        self.replay_button('orders|["c-3"]').click()
        self.wait(EC.alert_is_present(), "a confirmation").accept()
        self.wait(lambda d: "401" in d.find_element(By.ID, "replay-result").text,
                  "the replay refused with 401")
        rec = [p for p in self.world.parked_records() if p["sourceId"] == "o-bad"]
        self.assertTrue(rec and not any(p.get("replayRequested") for p in rec), rec)

    def login(self):
        if self.d.find_element(By.ID, "logout").is_displayed():
            return
        self.d.find_element(By.ID, "login-token").send_keys(h.TOKEN)
        self.d.find_element(By.ID, "login-go").click()
        self.wait(lambda d: d.find_element(By.ID, "logout").is_displayed(), "logged in")

    def test_6_replay_with_token_settles(self):
        # the operator fixes the order, then replays its key from the console
        bad = self.world.item("o-bad", "c-3")
        bad["lines"] = h.GOOD
        self.world.upsert("orders", {k: v for k, v in bad.items() if not k.startswith("_")})
        self.open("#/parked")
        self.wait(lambda d: len(self.rows("parked")) >= 2, "parked records")
        self.login()
        self.shot("parked.png")
        self.replay_button('orders|["c-3"]').click()
        self.wait(EC.alert_is_present(), "a confirmation").accept()
        self.wait(lambda d: "marked for replay" in d.find_element(By.ID, "replay-result").text,
                  "the replay accepted")
        self.assertTrue(self.world.wait_state("o-bad", "c-3", "completed"), "o-bad did not settle")
        self.open("#/parked")
        self.wait(lambda d: not any("o-bad" == c[1] for c in self.cells("parked")) and
                  len(self.rows("parked")) > 0, "o-bad no longer parked")
        self.open("#/saga/order-fulfilment/o-bad")
        self.wait(lambda d: "completed" in d.find_element(By.ID, "saga-status").text,
                  "o-bad shown completed")

    def test_7_pause_and_resume(self):
        self.open("#/fleet")
        self.wait(lambda d: len(self.rows("ranges")) > 0, "the ranges")
        self.assertEqual(self.cells("instances")[0][0], "console-test")
        self.login()
        self.d.find_element(By.ID, "pause-reason").send_keys("console test: kafka down")
        self.d.find_element(By.ID, "pause").click()
        self.wait(lambda d: d.find_element(By.ID, "fleet-state").text.startswith("Paused"),
                  "the fleet paused")
        self.assertIn("console test: kafka down", self.d.find_element(By.ID, "fleet-state").text)
        st, fleet = h.http("GET", self.base + "/api/v1/fleet")
        self.assertTrue(fleet["paused"])
        self.shot("fleet.png")
        self.d.find_element(By.ID, "resume").click()
        self.wait(lambda d: d.find_element(By.ID, "fleet-state").text.startswith("Running"),
                  "the fleet resumed")
        # a new order completes once resumed
        self.world.upsert("orders", h.order("o-after", "c-1", h.GOOD, 5))
        self.assertTrue(self.world.wait_state("o-after", "c-1", "completed"))

    def test_8_pause_refused_after_logout(self):
        self.open("#/fleet")
        self.wait(lambda d: len(self.rows("ranges")) > 0, "the ranges")
        if self.d.find_element(By.ID, "logout").is_displayed():
            self.d.find_element(By.ID, "logout").click()
            self.wait(lambda d: d.find_element(By.ID, "login").is_displayed(), "logged out")
        self.d.find_element(By.ID, "pause-reason").send_keys("nobody")
        self.d.find_element(By.ID, "pause").click()
        self.wait(lambda d: "401" in d.find_element(By.ID, "fleet-result").text, "pause refused")
        st, fleet = h.http("GET", self.base + "/api/v1/fleet")
        self.assertFalse(fleet["paused"])

    def test_9_charts(self):
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            st, c = h.http("GET", self.base + "/api/v1/charts")
            if len(c["samples"]) >= 3:
                break
            time.sleep(1)
        self.open("#/charts")
        self.wait(lambda d: "sample" in d.find_element(By.ID, "charts-source").text, "charts")
        for cid in ("chart-lag", "chart-settled", "chart-ru"):
            self.assertTrue(self.d.find_element(By.ID, cid).is_displayed())
        self.assertGreater(len(self.d.find_elements(By.CSS_SELECTOR, "#chart-ru polyline")), 0)
        self.shot("charts.png")


if __name__ == "__main__":
    unittest.main(verbosity=2)
