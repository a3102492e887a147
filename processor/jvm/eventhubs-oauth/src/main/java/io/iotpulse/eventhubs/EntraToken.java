package io.iotpulse.eventhubs;

import com.azure.core.credential.AccessToken;
import com.azure.json.JsonProviders;
import com.azure.json.JsonReader;
import java.io.IOException;
import java.util.Base64;
import java.util.Map;
import java.util.Set;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerToken;

/** An Entra ID access token as Kafka's OAUTHBEARER login wants it. */
final class EntraToken implements OAuthBearerToken {

  private final String value;
  private final String principal;
  private final Set<String> scope;
  private final long lifetimeMs;
  private final Long startTimeMs;

  private EntraToken(
      String value, String principal, Set<String> scope, long lifetimeMs, Long startTimeMs) {
    this.value = value;
    this.principal = principal;
    this.scope = scope;
    this.lifetimeMs = lifetimeMs;
    this.startTimeMs = startTimeMs;
  }

  /**
   * Wrap an access token; the principal and start time come from its JWT claims ({@code
   * appid}, {@code oid} or {@code sub}; {@code iat}) when it has them.
   */
  static EntraToken of(AccessToken token, String scope) {
    Map<String, Object> claims = claims(token.getToken());
    String principal = "unknown";
    for (String claim : new String[] {"appid", "oid", "sub"}) {
      Object v = claims.get(claim);
      if (v instanceof String s && !s.isEmpty()) {
        principal = s;
        break;
      }
    }
    Long start = claims.get("iat") instanceof Number n ? n.longValue() * 1000L : null;
    return new EntraToken(
        token.getToken(),
        principal,
        Set.of(scope),
        token.getExpiresAt().toInstant().toEpochMilli(),
        start);
  }

  /** The payload claims of a JWT, or an empty map when it is not one. */
  static Map<String, Object> claims(String jwt) {
    String[] parts = jwt.split("\\.", -1);
    if (parts.length != 3) {
      return Map.of();
    }
    try {
      byte[] payload = Base64.getUrlDecoder().decode(parts[1]);
      try (JsonReader reader = JsonProviders.createReader(payload)) {
        return reader.readMap(JsonReader::readUntyped);
      }
    } catch (IOException | RuntimeException e) {
      return Map.of();
    }
  }

  @Override
  public String value() {
    return value;
  }

  @Override
  public Set<String> scope() {
    return scope;
  }

  @Override
  public long lifetimeMs() {
    return lifetimeMs;
  }

  @Override
  public String principalName() {
    return principal;
  }

  @Override
  public Long startTimeMs() {
    return startTimeMs;
  }

  @Override
  public String toString() {
    // Never the token itself.
    return "EntraToken[principal=" + principal + ", scope=" + scope + ", expiresAtMs="
        + lifetimeMs + "]";
  }
}
