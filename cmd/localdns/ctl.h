/* localdns ctl — the control socket's command line (ctl.c). */
#ifndef LOCALDNS_CMD_CTL_H
#define LOCALDNS_CMD_CTL_H

/* `localdns ctl ...` with argv[0] = "ctl"; returns the exit status. */
int ctl_main(int argc, char **argv);

#endif
