package io.github.tandemtx.spring.boot;

import java.time.Duration;
import java.util.Locale;
import org.springframework.boot.context.properties.ConfigurationProperties;
import org.springframework.validation.Errors;
import org.springframework.validation.Validator;

/**
 * The {@code management.health.tandem.*} properties of the "tandem" health
 * indicator (beside Spring's own {@code management.health.tandem.enabled}).
 * Checked when bound, like {@link TandemProperties}.
 */
@ConfigurationProperties(prefix = "management.health.tandem")
public class TandemHealthProperties implements Validator {
    /**
     * The status reported when the coordinator does not answer, does not
     * serve, or does not know a data source's resource manager: UP (the
     * default: transactions decided at a commit point need no coordinator,
     * so its outage or a promotion does not take every instance out of
     * service; its state is in the details), DOWN, OUT_OF_SERVICE, or a
     * status of the application's own (e.g. DEGRADED, ordered with
     * management.endpoint.health.status.order).
     */
    private String unavailableStatus = "UP";

    /** How long one check waits for the coordinator's Health answer (with standbys: for all of them). */
    private Duration timeout = TandemHealthIndicator.TIMEOUT;

    /**
     * How long a check's answer is reused: probes within it make no
     * coordinator call. 0: each probe asks (one at a time: a probe that
     * finds a check under way reports the last answer).
     */
    private Duration cacheTimeToLive = TandemHealthIndicator.CACHE_TIME_TO_LIVE;

    public String getUnavailableStatus() {
        return unavailableStatus;
    }

    public void setUnavailableStatus(String unavailableStatus) {
        this.unavailableStatus = unavailableStatus;
    }

    public Duration getTimeout() {
        return timeout;
    }

    public void setTimeout(Duration timeout) {
        this.timeout = timeout;
    }

    public Duration getCacheTimeToLive() {
        return cacheTimeToLive;
    }

    public void setCacheTimeToLive(Duration cacheTimeToLive) {
        this.cacheTimeToLive = cacheTimeToLive;
    }

    /** The status code of an unavailable coordinator, upper-cased (as Spring's own codes: "down" is DOWN). */
    String unavailableStatusCode() {
        return unavailableStatus.strip().toUpperCase(Locale.ROOT);
    }

    @Override
    public boolean supports(Class<?> clazz) {
        return TandemHealthProperties.class.isAssignableFrom(clazz);
    }

    @Override
    public void validate(Object target, Errors errors) {
        TandemHealthProperties p = (TandemHealthProperties) target;
        if (p.unavailableStatus == null || p.unavailableStatus.isBlank()) {
            errors.rejectValue("unavailable-status", "management.health.tandem.unavailable-status.missing",
                    "want a status: UP, DOWN, OUT_OF_SERVICE or one of the application's own");
        }
        if (p.timeout == null || p.timeout.isNegative() || p.timeout.isZero()) {
            errors.rejectValue("timeout", "management.health.tandem.timeout.invalid", "must be positive, e.g. 3s");
        }
        if (p.cacheTimeToLive == null || p.cacheTimeToLive.isNegative()) {
            errors.rejectValue("cache-time-to-live", "management.health.tandem.cache-time-to-live.invalid", "must be 0 (none) or positive, e.g. 5s");
        }
    }
}
