/* A library named libnvidia-ml.so.1 that lacks nvmlInit_v2 and nvmlInit (and the other required
 * entry points): the loader must refuse it and list every missing required symbol at once. */
int nvmlShutdown(void) { return 0; }
const char* nvmlErrorString(int r) { (void)r; return "double"; }
