/*
 * daemon/internal.h — shared by the files of src/daemon/ only.
 */
#ifndef LOCALDNS_DAEMON_INTERNAL_H
#define LOCALDNS_DAEMON_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/daemon.h"

/* FNV-1a over every file of cfg (name and bytes; an unreadable one by its errno). */
uint64_t daemon_files_hash(const struct config *cfg);

/* Copies of the running config's file names (free each, then the array); NULL on ENOMEM. */
char **daemon_files(struct daemon *d, size_t *n);

#endif
