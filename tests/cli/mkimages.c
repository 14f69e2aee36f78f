/*
 * mkimages.c - a helper of tests/cli/pack_images.sh (built beside the
 * sluice binary as sluice_test_mkimages): writes the first N Fashion-MNIST
 * t10k images as PNG or JPEG files in ImageFolder class folders under DIR
 * (tests/image_fixture.h), then prints the label each record of `sluice
 * pack images DIR` must carry, one per line, in the packer's order (paths
 * sorted; the label is the rank of the class folder's name).
 *
 *   sluice_test_mkimages DIR N png|jpeg [FMNIST_DIR]
 */
#include "image_fixture.h"

static int cmp_name(const void *a, const void *b) {
  return strcmp(fix_class_names[*(const int *)a],
                fix_class_names[*(const int *)b]);
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s DIR N png|jpeg [FMNIST_DIR]\n", argv[0]);
    return 2;
  }
  int kind = strcmp(argv[3], "png") == 0 ? FIX_PNG : FIX_JPEG;
  fix_fmnist f;
  if (fix_fmnist_load(argc > 4 ? argv[4] : FIX_FMNIST_DIR,
                      (size_t)atol(argv[2]), &f) < 0)
    return 1;
  if (fix_make_folder(argv[1], &f, kind) < 0) {
    fprintf(stderr, "mkimages: cannot write %s\n", argv[1]);
    return 1;
  }
  int by_name[10];
  for (int c = 0; c < 10; c++)
    by_name[c] = c;
  qsort(by_name, 10, sizeof *by_name, cmp_name);
  for (int rank = 0; rank < 10; rank++)
    for (size_t i = 0; i < f.n; i++)
      if (f.labels[i] == by_name[rank]) printf("%d\n", rank);
  fix_fmnist_free(&f);
  return 0;
}
