#!/bin/sh
# kafka-server-start.sh CONFIG: the broker, with the distribution's defaults for heap and logging.
export KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xmx1G -Xms1G}"
export KAFKA_LOG4J_OPTS="${KAFKA_LOG4J_OPTS:--Dlog4j2.configurationFile=/opt/kafka/config/log4j2.yaml}"
exec /opt/kafka/bin/kafka-run-class.sh kafka.Kafka "$@"
