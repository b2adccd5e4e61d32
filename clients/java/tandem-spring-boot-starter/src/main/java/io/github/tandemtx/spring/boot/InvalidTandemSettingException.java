package io.github.tandemtx.spring.boot;

/**
 * A tandem.* setting that cannot work, found while the application starts
 * (beyond what the properties' own validation sees: a DataSource bean's
 * resource manager name or database). Its message names the property;
 * {@link TandemFailureAnalyzer} reports it.
 */
public class InvalidTandemSettingException extends RuntimeException {
    private static final long serialVersionUID = 1L;
    private final String property;

    public InvalidTandemSettingException(String property, String message) {
        super(message);
        this.property = property;
    }

    public InvalidTandemSettingException(String property, String message, Throwable cause) {
        super(message, cause);
        this.property = property;
    }

    /** The property to set or change. */
    public String property() {
        return property;
    }
}
