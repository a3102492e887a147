package io.iotpulse.eventhubs;

import com.azure.core.credential.AccessToken;
import com.azure.core.credential.TokenCredential;
import com.azure.core.credential.TokenRequestContext;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.time.temporal.ChronoUnit;
import java.util.Base64;
import reactor.core.publisher.Mono;

/**
 * Mints unsigned JWTs ({@code alg: none}) for a local broker that runs Kafka's unsecured
 * OAUTHBEARER validator. Event Hubs rejects them: this stands in for Entra ID in tests only.
 */
final class UnsecuredJwtCredential implements TokenCredential {

  static final Duration LIFETIME = Duration.ofHours(1);
  private static final Base64.Encoder B64 = Base64.getUrlEncoder().withoutPadding();

  private final String subject;

  UnsecuredJwtCredential(String subject) {
    if (!subject.matches("[A-Za-z0-9._@-]+")) {
      throw new IllegalArgumentException("unsecuredSubject may hold only [A-Za-z0-9._@-]");
    }
    this.subject = subject;
  }

  @Override
  public Mono<AccessToken> getToken(TokenRequestContext request) {
    return Mono.fromSupplier(() -> getTokenSync(request));
  }

  @Override
  public AccessToken getTokenSync(TokenRequestContext request) {
    Instant now = Instant.now().truncatedTo(ChronoUnit.SECONDS);
    Instant expires = now.plus(LIFETIME);
    String scope = String.join(" ", request.getScopes());
    String header = "{\"alg\":\"none\"}";
    String payload =
        "{\"sub\":\""
            + subject
            + "\",\"iat\":"
            + now.getEpochSecond()
            + ",\"exp\":"
            + expires.getEpochSecond()
            + ",\"scope\":\""
            + scope.replace("\\", "\\\\").replace("\"", "\\\"")
            + "\"}";
    String jwt = encode(header) + "." + encode(payload) + ".";
    return new AccessToken(jwt, OffsetDateTime.ofInstant(expires, ZoneOffset.UTC));
  }

  private static String encode(String json) {
    return B64.encodeToString(json.getBytes(StandardCharsets.UTF_8));
  }
}
