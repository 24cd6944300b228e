// The health check of the development token issuer (docker-compose.yml, service
// oauth). Its image is distroless: no shell, no curl, only a JVM, which runs this
// one file as a program (java Healthcheck.java URL). Exit 0 when URL answers 200.
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;

public class Healthcheck {
    public static void main(String[] args) {
        try {
            HttpClient client = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(2)).build();
            HttpRequest req = HttpRequest.newBuilder(URI.create(args[0])).timeout(Duration.ofSeconds(3)).GET().build();
            int status = client.send(req, HttpResponse.BodyHandlers.discarding()).statusCode();
            System.exit(status == 200 ? 0 : 1);
        } catch (Exception e) {
            System.err.println("healthcheck: " + e);
            System.exit(1);
        }
    }
}
