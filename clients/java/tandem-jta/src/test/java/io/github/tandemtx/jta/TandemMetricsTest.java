package io.github.tandemtx.jta;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tandemtx.jta.metrics.TandemMetrics;
import io.micrometer.prometheusmetrics.PrometheusConfig;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

/**
 * The Micrometer binder's output as Prometheus scrapes it (no database, no
 * coordinator: outcomes are fed to the managers' counters directly): the Go
 * SDK's names, types, label names and values, bucket bounds, and counts.
 */
class TandemMetricsTest {
    /** One scrape in the Prometheus text format: samples by "name{k="v",…}" (labels sorted), and # TYPE by family. */
    record Scrape(Map<String, Double> samples, Map<String, String> types, String text) {
        static final Pattern SAMPLE = Pattern.compile("^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\\{(.*)\\})? (\\S+)$");
        static final Pattern LABEL = Pattern.compile("([a-zA-Z_][a-zA-Z0-9_]*)=\"((?:[^\"\\\\]|\\\\.)*)\",?");

        static Scrape parse(String text) {
            Map<String, Double> samples = new LinkedHashMap<>();
            Map<String, String> types = new TreeMap<>();
            for (String line : text.split("\n")) {
                if (line.startsWith("# TYPE ")) {
                    String[] f = line.substring(7).split(" ");
                    types.put(f[0], f[1]);
                    continue;
                }
                if (line.isEmpty() || line.startsWith("#")) {
                    continue;
                }
                Matcher m = SAMPLE.matcher(line);
                assertTrue(m.matches(), "not a sample line: " + line);
                samples.put(key(m.group(1), m.group(2)), Double.parseDouble(m.group(3)));
            }
            return new Scrape(samples, types, text);
        }

        static String key(String name, String labels) {
            Map<String, String> ls = new TreeMap<>();
            if (labels != null) {
                Matcher lm = LABEL.matcher(labels);
                while (lm.find()) {
                    ls.put(lm.group(1), lm.group(2));
                }
            }
            if (ls.isEmpty()) {
                return name;
            }
            List<String> parts = new ArrayList<>();
            ls.forEach((k, v) -> parts.add(k + "=\"" + v + "\""));
            return name + "{" + String.join(",", parts) + "}";
        }

        /** The value of the sample; fails when it is absent. */
        double get(String name, String... kv) {
            List<String> parts = new ArrayList<>();
            Map<String, String> ls = new TreeMap<>();
            for (int i = 0; i < kv.length; i += 2) {
                ls.put(kv[i], kv[i + 1]);
            }
            ls.forEach((k, v) -> parts.add(k + "=\"" + v + "\""));
            String k = parts.isEmpty() ? name : name + "{" + String.join(",", parts) + "}";
            Double v = samples.get(k);
            assertTrue(v != null, "no sample " + k + " in the scrape:\n" + text);
            return v;
        }

        /** Every sample of the family name (its _bucket, _count, _sum included). */
        List<String> of(String name) {
            List<String> out = new ArrayList<>();
            for (String k : samples.keySet()) {
                if (k.startsWith(name + "{") || k.equals(name) || k.startsWith(name + "_")) {
                    out.add(k);
                }
            }
            return out;
        }
    }

    static Scrape scrape(PrometheusMeterRegistry reg) {
        return Scrape.parse(reg.scrape());
    }

    @Test
    void namesTypesLabelsAndCountsAreTheGoSdks() {
        PrometheusMeterRegistry reg = new PrometheusMeterRegistry(PrometheusConfig.DEFAULT);
        try (TandemTransactionManager tm = TandemTransactionManager.create(TandemConfig.coordinator("127.0.0.1:1"))) {
            new TandemMetrics(tm).bindTo(reg);
            ClientMetrics m = tm.metrics();
            for (int i = 0; i < 3; i++) {
                m.committed(ClientMetrics.Path.COMMIT_POINT, TimeUnit.MICROSECONDS.toNanos(2000)); // le 2^11 µs = 0.002048 s
            }
            m.committed(ClientMetrics.Path.TWO_PHASE, TimeUnit.MILLISECONDS.toNanos(5));
            m.aborted(ClientMetrics.AbortStage.PREPARE, TimeUnit.MILLISECONDS.toNanos(1));
            m.aborted(ClientMetrics.AbortStage.PREPARE, TimeUnit.MILLISECONDS.toNanos(1));
            m.aborted(ClientMetrics.AbortStage.DECIDED_ABORT, TimeUnit.MILLISECONDS.toNanos(1));
            m.outcomeUnknown(TimeUnit.SECONDS.toNanos(40)); // past the last bucket: +Inf only
            for (int i = 0; i < 4; i++) {
                m.rolledBack();
            }
            m.coordinatorCalls.add(7);

            Scrape s = scrape(reg);
            if (Boolean.getBoolean("tandem.printScrape")) {
                System.out.println(s.text());
            }
            Map<String, String> wantTypes = Map.of("tandem_client_commits_total", "counter", "tandem_client_commit_seconds", "histogram",
                    "tandem_client_aborts_total", "counter", "tandem_client_outcome_unknown_total", "counter",
                    "tandem_client_failed_commit_seconds", "histogram", "tandem_client_rollbacks_total", "counter",
                    "tandem_client_coordinator_calls_total", "counter");
            wantTypes.forEach((name, type) -> {
                // The text format names a counter's family with or without _total; the samples carry it.
                String t = s.types().getOrDefault(name, s.types().get(name.replaceFirst("_total$", "")));
                assertEquals(type, t, name + "'s # TYPE in:\n" + s.text());
            });

            assertEquals(3, s.get("tandem_client_commits_total", "path", "commit-point"));
            assertEquals(1, s.get("tandem_client_commits_total", "path", "two-phase"));
            assertEquals(0, s.get("tandem_client_commits_total", "path", "local"));
            assertEquals(0, s.get("tandem_client_commits_total", "path", "one-phase"));
            assertEquals(4, s.of("tandem_client_commits_total").size(), "one series per path: " + s.of("tandem_client_commits_total"));

            String[] stages = {"statement", "setup", "prepare", "commit", "decided-abort", "refused", "no-coordinator", "other"};
            for (String st : stages) {
                double want = st.equals("prepare") ? 2 : st.equals("decided-abort") ? 1 : 0;
                assertEquals(want, s.get("tandem_client_aborts_total", "stage", st), st);
            }
            assertEquals(stages.length, s.of("tandem_client_aborts_total").size(), "one series per stage");
            assertEquals(1, s.get("tandem_client_outcome_unknown_total"));
            assertEquals(4, s.get("tandem_client_rollbacks_total"));
            assertEquals(7, s.get("tandem_client_coordinator_calls_total"));

            // The histogram: the Go SDK's buckets, 2^i µs for i = 0..25, then +Inf; cumulative.
            List<String> buckets = new ArrayList<>();
            for (String k : s.of("tandem_client_commit_seconds_bucket")) {
                if (k.contains("path=\"commit-point\"")) {
                    buckets.add(k);
                }
            }
            assertEquals(27, buckets.size(), "26 bounds and +Inf: " + buckets);
            for (int i = 0; i < 26; i++) {
                double le = (1L << i) / 1e6;
                String key = buckets.stream().filter(b -> {
                    Matcher lm = Pattern.compile("le=\"([^\"]+)\"").matcher(b);
                    return lm.find() && !lm.group(1).equals("+Inf") && Math.abs(Double.parseDouble(lm.group(1)) - le) < le * 1e-9;
                }).findFirst().orElse(null);
                assertTrue(key != null, "no bucket le=" + le + " in " + buckets);
                assertEquals(i >= 11 ? 3 : 0, s.samples().get(key), key);
            }
            assertEquals(3, s.get("tandem_client_commit_seconds_bucket", "path", "commit-point", "le", "+Inf"));
            assertEquals(3, s.get("tandem_client_commit_seconds_count", "path", "commit-point"));
            assertEquals(0.006, s.get("tandem_client_commit_seconds_sum", "path", "commit-point"), 1e-9);
            assertEquals(1, s.get("tandem_client_commit_seconds_count", "path", "two-phase"));
            assertEquals(0, s.get("tandem_client_commit_seconds_count", "path", "local"));

            assertEquals(3, s.get("tandem_client_failed_commit_seconds_count", "outcome", "aborted"));
            assertEquals(1, s.get("tandem_client_failed_commit_seconds_count", "outcome", "unknown"));
            assertEquals(1, s.get("tandem_client_failed_commit_seconds_bucket", "outcome", "unknown", "le", "+Inf"));
            assertEquals(0, s.get("tandem_client_failed_commit_seconds_bucket", "outcome", "unknown", "le", String.valueOf((1L << 25) / 1e6)),
                    "40 s is past the last bound (33.55 s)");

            // Every series carries exactly the Go SDK's label (and le), nothing else.
            for (String k : s.samples().keySet()) {
                if (k.startsWith("tandem_client_commit")) {
                    assertTrue(k.matches("[a-z_]+\\{(le=\"[^\"]+\",)?path=\"[a-z-]+\"\\}"), k);
                } else if (k.startsWith("tandem_client_aborts")) {
                    assertTrue(k.matches("[a-z_]+\\{stage=\"[a-z-]+\"\\}"), k);
                } else if (k.startsWith("tandem_client_failed_commit")) {
                    assertTrue(k.matches("[a-z_]+\\{(le=\"[^\"]+\",)?outcome=\"(aborted|unknown)\"\\}"), k);
                } else if (k.startsWith("tandem_client_")) {
                    assertFalse(k.contains("{"), k);
                }
            }
        }
    }

    /** Two managers: their counters summed, their commits in one histogram; after close, the histograms stop, the counters go on. */
    @Test
    void managersAreSummedAndCloseStopsTheTimers() throws Exception {
        PrometheusMeterRegistry reg = new PrometheusMeterRegistry(PrometheusConfig.DEFAULT);
        try (TandemTransactionManager a = TandemTransactionManager.create(TandemConfig.coordinator("127.0.0.1:1"));
                TandemTransactionManager b = TandemTransactionManager.create(TandemConfig.coordinator("127.0.0.1:1"))) {
            a.metrics().committed(ClientMetrics.Path.LOCAL, 1000); // before the binding: counted, not timed
            TandemMetrics binder = new TandemMetrics(a, b);
            binder.bindTo(reg);
            a.metrics().committed(ClientMetrics.Path.LOCAL, 1000);
            b.metrics().committed(ClientMetrics.Path.LOCAL, 1000);
            Scrape s = scrape(reg);
            assertEquals(3, s.get("tandem_client_commits_total", "path", "local"));
            assertEquals(2, s.get("tandem_client_commit_seconds_count", "path", "local"));
            binder.close();
            b.metrics().committed(ClientMetrics.Path.LOCAL, 1000);
            s = scrape(reg);
            assertEquals(4, s.get("tandem_client_commits_total", "path", "local"));
            assertEquals(2, s.get("tandem_client_commit_seconds_count", "path", "local"));
        }
    }

    /** A listener that throws changes nothing: the outcome is counted, the others are told. */
    @Test
    void aFailingListenerIsIgnored() throws Exception {
        java.util.logging.Logger log = java.util.logging.Logger.getLogger("io.github.tandemtx.jta");
        java.util.logging.Level was = log.getLevel();
        log.setLevel(java.util.logging.Level.OFF); // the warning with its stack trace is expected
        try (TandemTransactionManager tm = TandemTransactionManager.create(TandemConfig.coordinator("127.0.0.1:1"))) {
            long[] told = new long[1];
            tm.metrics().addListener(new ClientMetrics.Listener() {
                @Override
                public void committed(ClientMetrics.Path path, long nanos) {
                    throw new IllegalStateException("listener bug");
                }

                @Override
                public void aborted(ClientMetrics.AbortStage stage, long nanos) {
                }

                @Override
                public void outcomeUnknown(long nanos) {
                }
            });
            tm.metrics().addListener(new ClientMetrics.Listener() {
                @Override
                public void committed(ClientMetrics.Path path, long nanos) {
                    told[0]++;
                }

                @Override
                public void aborted(ClientMetrics.AbortStage stage, long nanos) {
                }

                @Override
                public void outcomeUnknown(long nanos) {
                }
            });
            tm.metrics().committed(ClientMetrics.Path.ONE_PHASE, 1);
            assertEquals(1, tm.metrics().committed(ClientMetrics.Path.ONE_PHASE));
            assertEquals(1, told[0]);
        } finally {
            log.setLevel(was);
        }
    }
}
