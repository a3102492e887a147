package io.iotpulse.eventhubs;

import com.azure.core.credential.AccessToken;
import com.azure.core.credential.TokenCredential;
import com.azure.core.credential.TokenRequestContext;
import com.azure.identity.DefaultAzureCredentialBuilder;
import java.io.IOException;
import java.net.URI;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import javax.security.auth.callback.Callback;
import javax.security.auth.callback.UnsupportedCallbackException;
import javax.security.auth.login.AppConfigurationEntry;
import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.common.security.auth.AuthenticateCallbackHandler;
import org.apache.kafka.common.security.auth.SaslExtensionsCallback;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerTokenCallback;

/**
 * Kafka OAUTHBEARER login callback handler that gets Microsoft Entra ID tokens for Azure Event
 * Hubs' Kafka endpoint from azure-identity.
 *
 * <p>Client configuration (Spark: prefix every key with {@code kafka.}):
 *
 * <pre>
 * security.protocol=SASL_SSL
 * sasl.mechanism=OAUTHBEARER
 * sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;
 * sasl.login.callback.handler.class=io.iotpulse.eventhubs.EntraLoginCallbackHandler
 * </pre>
 *
 * <p>Options of the JAAS entry, all optional:
 *
 * <ul>
 *   <li>{@code scope}: the token scope; default {@code https://<host of the first bootstrap
 *       server>/.default}, i.e. {@code https://<namespace>.servicebus.windows.net/.default}.
 *   <li>{@code tokenSource}: {@code azure} (default) uses {@code DefaultAzureCredential}, which
 *       tries environment variables (a service principal), workload identity, managed identity
 *       and the Azure CLI login in turn. {@code unsecured} mints unsigned JWTs ({@code alg:
 *       none}) instead, the counterpart of Kafka's own unsecured login handler: for a local
 *       broker whose listener uses Kafka's unsecured validator, never for Event Hubs, which
 *       rejects them.
 *   <li>{@code unsecuredSubject}: the {@code sub} claim of unsecured tokens; default {@code
 *       iot-pulse}.
 * </ul>
 */
public final class EntraLoginCallbackHandler implements AuthenticateCallbackHandler {

  /** JAAS option naming the token scope. */
  public static final String SCOPE_OPTION = "scope";

  /** JAAS option choosing where tokens come from: {@code azure} or {@code unsecured}. */
  public static final String TOKEN_SOURCE_OPTION = "tokenSource";

  /** JAAS option: the subject of unsecured tokens. */
  public static final String UNSECURED_SUBJECT_OPTION = "unsecuredSubject";

  private static final String DEFAULT_UNSECURED_SUBJECT = "iot-pulse";

  private TokenCredential credential;
  private TokenRequestContext request;
  private String scope;

  @Override
  public void configure(
      Map<String, ?> configs, String saslMechanism, List<AppConfigurationEntry> jaasConfigEntries) {
    if (!OAuthBearerLoginModule.OAUTHBEARER_MECHANISM.equals(saslMechanism)) {
      throw new IllegalArgumentException(
          "EntraLoginCallbackHandler serves sasl.mechanism=OAUTHBEARER, not " + saslMechanism);
    }
    Map<String, ?> options = jaasOptions(jaasConfigEntries);
    scope = option(options, SCOPE_OPTION);
    if (scope == null) {
      scope = defaultScope(configs.get(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG));
    }
    String source = Objects.requireNonNullElse(option(options, TOKEN_SOURCE_OPTION), "azure");
    switch (source.toLowerCase(Locale.ROOT)) {
      case "azure" -> credential = new DefaultAzureCredentialBuilder().build();
      case "unsecured" ->
          credential =
              new UnsecuredJwtCredential(
                  Objects.requireNonNullElse(
                      option(options, UNSECURED_SUBJECT_OPTION), DEFAULT_UNSECURED_SUBJECT));
      default ->
          throw new IllegalArgumentException(
              "unknown tokenSource '" + source + "' in sasl.jaas.config: use azure or unsecured");
    }
    request = new TokenRequestContext().addScopes(scope);
  }

  /** The scope tokens are requested for (after {@link #configure}). */
  public String scope() {
    return scope;
  }

  /** Use this credential instead of the configured one (for embedding and tests). */
  public void setCredential(TokenCredential credential) {
    this.credential = Objects.requireNonNull(credential, "credential");
  }

  @Override
  public void handle(Callback[] callbacks) throws IOException, UnsupportedCallbackException {
    if (credential == null) {
      throw new IllegalStateException("configure() was not called");
    }
    for (Callback callback : callbacks) {
      if (callback instanceof OAuthBearerTokenCallback tokenCallback) {
        tokenCallback.token(fetch());
      } else if (!(callback instanceof SaslExtensionsCallback)) {
        // Extensions stay empty: Event Hubs needs none.
        throw new UnsupportedCallbackException(callback);
      }
    }
  }

  private EntraToken fetch() throws IOException {
    AccessToken token;
    try {
      token = credential.getTokenSync(request);
    } catch (RuntimeException e) {
      throw new IOException(
          "could not get a Microsoft Entra ID token for scope " + scope + ": " + e.getMessage()
              + " (sign in with 'az login', or set AZURE_CLIENT_ID, AZURE_TENANT_ID and"
              + " AZURE_CLIENT_SECRET, or run where a managed identity is assigned)",
          e);
    }
    if (token == null) {
      throw new IOException("the credential returned no token for scope " + scope);
    }
    return EntraToken.of(token, scope);
  }

  @Override
  public void close() {
    credential = null;
  }

  static String defaultScope(Object bootstrapServers) {
    String first = firstBootstrapServer(bootstrapServers);
    if (first == null) {
      throw new IllegalArgumentException(
          "no scope option in sasl.jaas.config and no bootstrap.servers to derive it from");
    }
    String host = first;
    if (host.contains("://")) {
      host = URI.create(host).getHost();
    } else if (host.lastIndexOf(':') > 0) {
      host = host.substring(0, host.lastIndexOf(':'));
    }
    return "https://" + host + "/.default";
  }

  private static String firstBootstrapServer(Object bootstrapServers) {
    if (bootstrapServers instanceof List<?> list && !list.isEmpty()) {
      return String.valueOf(list.get(0)).trim();
    }
    if (bootstrapServers instanceof String text && !text.isBlank()) {
      return text.split(",")[0].trim();
    }
    return null;
  }

  private static Map<String, ?> jaasOptions(List<AppConfigurationEntry> entries) {
    for (AppConfigurationEntry entry : entries) {
      if (OAuthBearerLoginModule.class.getName().equals(entry.getLoginModuleName())) {
        return entry.getOptions();
      }
    }
    return Map.of();
  }

  private static String option(Map<String, ?> options, String name) {
    Object value = options.get(name);
    if (value == null || String.valueOf(value).isBlank()) {
      return null;
    }
    return String.valueOf(value).trim();
  }
}
