#!/bin/sh
# Runs a class of Kafka's jars with the KAFKA_* JVM options, as the distribution's script does.
if [ -z "${KAFKA_LOG4J_OPTS:-}" ]; then
  config=/opt/kafka/config/tools-log4j2.yaml
  [ -f "$config" ] || config=/etc/kafka/docker/tools-log4j2.yaml
  KAFKA_LOG4J_OPTS="-Dlog4j2.configurationFile=$config"
fi
# shellcheck disable=SC2086  # each variable holds several JVM options
exec java ${KAFKA_HEAP_OPTS:--Xmx256M} ${KAFKA_JVM_PERFORMANCE_OPTS:-} ${KAFKA_OPTS:-} \
  $KAFKA_LOG4J_OPTS -cp '/opt/kafka/libs/*' "$@"
