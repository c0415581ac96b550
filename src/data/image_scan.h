// Listing an image-folder data set (torchvision's ImageFolder layout or TinyImageNet's) without
// opening an image: the class names, and each split's image paths with their labels, sorted.
// Used by image_folder.cpp, which reads the headers and decodes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ember {

struct FolderOptions;

namespace detail {

struct Item {
  std::string path;
  int label;
};
struct Split {
  std::vector<Item> items;
  int64_t skipped = 0;  // files that are not named as images
  int64_t total = 0;    // images listed before the limit kept the first ones
};
struct Listing {
  std::vector<std::string> classes;
  Split train, test;
};
// The classes and both splits of dir (the limits applied). Errors name o.what and the path.
Listing list_image_folder(const std::string& dir, const FolderOptions& o);
bool is_dir(const std::string& path);  // follows a symlink

}  // namespace detail
}  // namespace ember
